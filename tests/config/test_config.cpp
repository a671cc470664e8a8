// Config loading: default.toml equals the built-in defaults, overrides apply,
// and every kind of mistake is an error naming the file, line and key.
#include <gtest/gtest.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

#include "config/config.h"
#include "config/xdg.h"

namespace cc = clchat::config;

namespace {

std::string error_of(const std::string& text) {
  try {
    cc::parse_config(text, "test.toml");
  } catch (const cc::ConfigError& e) {
    return e.what();
  }
  return "(no error)";
}

}  // namespace

TEST(Config, DefaultTomlMatchesBuiltInDefaults) {
  const auto c =
      cc::load_config_file(std::filesystem::path(CLCHAT_SOURCE_DIR) / "config/default.toml");
  const cc::Config d;
  EXPECT_EQ(c.model, d.model);
  EXPECT_EQ(c.device, d.device);
  EXPECT_EQ(c.backend, d.backend);
  EXPECT_EQ(c.n_ctx, d.n_ctx);
  EXPECT_EQ(c.chat_template, d.chat_template);
  EXPECT_EQ(c.system_prompt, d.system_prompt);
  EXPECT_EQ(c.prefill_chunk, d.prefill_chunk);
  EXPECT_EQ(c.profiling, d.profiling);
  EXPECT_EQ(c.log_level, d.log_level);
  EXPECT_EQ(c.sampling.temperature, d.sampling.temperature);
  EXPECT_EQ(c.sampling.top_k, d.sampling.top_k);
  EXPECT_EQ(c.sampling.top_p, d.sampling.top_p);
  EXPECT_EQ(c.sampling.min_p, d.sampling.min_p);
  EXPECT_EQ(c.sampling.repeat_penalty, d.sampling.repeat_penalty);
  EXPECT_EQ(c.sampling.repeat_last_n, d.sampling.repeat_last_n);
  EXPECT_EQ(c.sampling.seed, d.sampling.seed);
  EXPECT_EQ(c.sampling.max_tokens, d.sampling.max_tokens);
  EXPECT_EQ(c.engine.persistent_decode, d.engine.persistent_decode);
  EXPECT_EQ(c.engine.tensor_cores, d.engine.tensor_cores);
  EXPECT_EQ(c.engine.lookahead, d.engine.lookahead);
  EXPECT_EQ(c.engine.kernel_cache, d.engine.kernel_cache);
  EXPECT_EQ(c.ui.panel, d.ui.panel);
  EXPECT_EQ(c.ui.panel_width, d.ui.panel_width);
  EXPECT_EQ(c.ui.panel_min_columns, d.ui.panel_min_columns);
  EXPECT_EQ(c.ui.mouse, d.ui.mouse);
  EXPECT_EQ(c.ui.scroll_lines, d.ui.scroll_lines);
  EXPECT_EQ(c.ui.color, d.ui.color);
  EXPECT_EQ(c.ui.colors.user, d.ui.colors.user);
  EXPECT_EQ(c.ui.colors.assistant, d.ui.colors.assistant);
  EXPECT_EQ(c.ui.colors.system, d.ui.colors.system);
  EXPECT_EQ(c.ui.colors.accent, d.ui.colors.accent);
  EXPECT_EQ(c.ui.colors.bar, d.ui.colors.bar);
  EXPECT_EQ(c.ui.colors.warning, d.ui.colors.warning);
  EXPECT_EQ(c.keys.toggle_panel, d.keys.toggle_panel);
  EXPECT_EQ(c.keys.toggle_debug, d.keys.toggle_debug);
}

TEST(Config, OverridesKeepOtherDefaults) {
  const auto c = cc::parse_config(R"(
model = "/m.gguf"
context_size = 512
[sampling]
temperature = 0
top_k = 7
[ui]
panel = false
[ui.colors]
user = "magenta"
[keys]
toggle_debug = "F9"
)",
                                  "t.toml");
  EXPECT_EQ(c.model, "/m.gguf");
  EXPECT_EQ(c.n_ctx, 512);
  EXPECT_EQ(c.sampling.temperature, 0.0);  // an integer is accepted for a float
  EXPECT_EQ(c.sampling.top_k, 7);
  EXPECT_EQ(c.sampling.top_p, cc::Sampling{}.top_p);
  EXPECT_FALSE(c.ui.panel);
  EXPECT_EQ(c.ui.colors.user, "magenta");
  EXPECT_EQ(c.ui.colors.accent, cc::Colors{}.accent);
  EXPECT_EQ(c.keys.toggle_debug, 9);
  EXPECT_EQ(c.keys.toggle_panel, 2);
}

// Every [engine] key is written out in default.toml (with its comment), not
// only equal to the built-in default by being absent.
TEST(Config, DefaultTomlListsTheEngineSwitches) {
  std::ifstream in(std::filesystem::path(CLCHAT_SOURCE_DIR) / "config/default.toml");
  const std::string text((std::istreambuf_iterator<char>(in)), std::istreambuf_iterator<char>());
  const size_t table = text.find("\n[engine]\n");
  ASSERT_NE(table, std::string::npos);
  for (const char* line : {"\npersistent_decode = true\n", "\ntensor_cores = true\n",
                           "\nlookahead = true\n", "\nkernel_cache = \"\"\n"}) {
    const size_t at = text.find(line);
    EXPECT_NE(at, std::string::npos) << line;
    EXPECT_GT(at, table) << line;
    EXPECT_EQ(text[text.rfind('\n', at - 1) + 1], '#') << "no comment above " << line;
  }
}

TEST(Config, EngineSwitches) {
  const cc::Engine d;
  EXPECT_TRUE(d.persistent_decode);
  EXPECT_TRUE(d.tensor_cores);
  EXPECT_TRUE(d.lookahead);
  EXPECT_EQ(d.kernel_cache, "");
  const auto c = cc::parse_config(R"(
[engine]
persistent_decode = false
lookahead = false
kernel_cache = "/tmp/k"
)",
                                  "t.toml");
  EXPECT_FALSE(c.engine.persistent_decode);
  EXPECT_TRUE(c.engine.tensor_cores);
  EXPECT_FALSE(c.engine.lookahead);
  EXPECT_EQ(c.engine.kernel_cache, "/tmp/k");
  EXPECT_FALSE(cc::parse_config("[engine]\ntensor_cores = false\n", "t.toml").engine.tensor_cores);
}

TEST(Config, BadEngineSwitchesAreErrors) {
  EXPECT_EQ(error_of("[engine]\npersistent_decode = \"no\"\n"),
            "test.toml:2: engine.persistent_decode: expected true or false");
  EXPECT_EQ(error_of("[engine]\n\ntensor_cores = 0\n"),
            "test.toml:3: engine.tensor_cores: expected true or false");
  EXPECT_EQ(error_of("[engine]\nlookahead = \"off\"\n"),
            "test.toml:2: engine.lookahead: expected true or false");
  EXPECT_EQ(error_of("[engine]\nkernel_cache = 1\n"),
            "test.toml:2: engine.kernel_cache: expected a string");
  EXPECT_EQ(error_of("[engine]\npersistent = false\n"),
            "test.toml:2: engine.persistent: unknown setting (see config/default.toml)");
  EXPECT_EQ(error_of("engine = true\n"), "test.toml:1: engine: expected a table [engine]");
}

TEST(Config, EmptyFileIsAllDefaults) {
  const auto c = cc::parse_config("", "t.toml");
  EXPECT_EQ(c.system_prompt, cc::Config{}.system_prompt);
}

TEST(Config, WrongTypeNamesKeyAndLine) {
  EXPECT_EQ(error_of("model = \"x\"\n[sampling]\ntop_k = \"many\"\n"),
            "test.toml:3: sampling.top_k: expected an integer");
  EXPECT_EQ(error_of("[ui]\npanel = 1\n"), "test.toml:2: ui.panel: expected true or false");
  EXPECT_EQ(error_of("system_prompt = 3\n"), "test.toml:1: system_prompt: expected a string");
}

TEST(Config, OutOfRangeNamesKeyAndLine) {
  EXPECT_EQ(error_of("\n\n[sampling]\ntop_p = 1.5\n"),
            "test.toml:4: sampling.top_p: must be between 0 and 1");
  EXPECT_EQ(error_of("context_size = -1\n"),
            "test.toml:1: context_size: must be between 0 and 16777216");
}

TEST(Config, BadChoicesAreErrors) {
  EXPECT_EQ(error_of("backend = \"cuda\"\n"),
            "test.toml:1: backend: \"cuda\" is not one of opencl, reference");
  EXPECT_EQ(error_of("[ui.colors]\nuser = \"pink\"\n").rfind("test.toml:2: ui.colors.user: ", 0),
            0u);
  EXPECT_EQ(error_of("[keys]\ntoggle_panel = \"F13\"\n"),
            "test.toml:2: keys.toggle_panel: expected a function key name \"F1\" to \"F12\"");
  EXPECT_EQ(error_of("[keys]\ntoggle_panel = \"Fx\"\n").rfind("test.toml:2: keys.toggle_panel", 0),
            0u);
}

TEST(Config, UnknownKeyIsAnError) {
  EXPECT_EQ(error_of("model = \"\"\n[ui]\npanle = true\n"),
            "test.toml:3: ui.panle: unknown setting (see config/default.toml)");
  EXPECT_EQ(error_of("colour = 1\n"),
            "test.toml:1: colour: unknown setting (see config/default.toml)");
  EXPECT_EQ(error_of("ui = 3\n"), "test.toml:1: ui: expected a table [ui]");
}

TEST(Config, SyntaxErrorNamesLine) {
  const auto e = error_of("model = \"a\"\nbroken = = 3\n");
  EXPECT_EQ(e.rfind("test.toml:2: syntax error: ", 0), 0u) << e;
}

TEST(Config, MissingExplicitFileIsAnError) {
  EXPECT_THROW(cc::load_config(std::filesystem::path("/nonexistent/clchat.toml")), cc::ConfigError);
}

TEST(Config, LookupUsesXdgConfigHome) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("clchat-config-test-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir / "clchat");
  const char* old = std::getenv("XDG_CONFIG_HOME");
  const std::string saved = old ? old : "";
  ::setenv("XDG_CONFIG_HOME", dir.c_str(), 1);
  EXPECT_EQ(cc::config_dir(), dir / "clchat");
  EXPECT_EQ(cc::load_config(std::nullopt).n_ctx, cc::Config{}.n_ctx);  // no file yet
  std::ofstream(dir / "clchat/config.toml") << "context_size = 99\n";
  EXPECT_EQ(cc::load_config(std::nullopt).n_ctx, 99);
  // A relative XDG path is ignored, as the specification says.
  ::setenv("XDG_CONFIG_HOME", "relative/dir", 1);
  EXPECT_NE(cc::config_dir(), std::filesystem::path("relative/dir/clchat"));
  if (old) {
    ::setenv("XDG_CONFIG_HOME", saved.c_str(), 1);
  } else {
    ::unsetenv("XDG_CONFIG_HOME");
  }
  std::filesystem::remove_all(dir);
}

TEST(Config, ColorNames) {
  EXPECT_EQ(cc::color_number("default"), -1);
  EXPECT_EQ(cc::color_number("black"), 0);
  EXPECT_EQ(cc::color_number("white"), 7);
  EXPECT_FALSE(cc::color_number("pink").has_value());
}
