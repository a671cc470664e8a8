// clchat entry point: parses the command line and runs a subcommand. Every
// error ends here as one line on stderr and an exit code: 0 success, 2 bad
// usage or bad input file, 1 any other runtime error.
#include <spdlog/sinks/stdout_color_sinks.h>
#include <spdlog/spdlog.h>

#include <CLI/CLI.hpp>
#include <cstdio>
#include <exception>

#include "app/chat_screen.h"
#include "app/cmd_chat.h"
#include "app/commands.h"
#include "config/logging.h"
#include "engine/cl/build_error.h"
#include "engine/cl/runtime.h"
#include "engine/gguf/gguf.h"

int main(int argc, char** argv) {
  // Log lines go to stderr, never stdout (replies, --ids and --json are data);
  // only warnings and errors. The chat screen replaces this with its log file.
  spdlog::set_default_logger(spdlog::stderr_color_mt("clchat-stderr"));
  spdlog::set_level(spdlog::level::warn);
  CLI::App app{"clchat: terminal chat with its own OpenCL inference engine"};
  // No subcommand: a chat (line mode when stdin is not a terminal).
  app.require_subcommand(0, 1);
  clchat::app::ChatOptions chat;
  clchat::app::ScreenOptions screen;
  // The config file seeds the chat options first, so flags override it.
  if (const int rc = clchat::app::load_config_defaults(argc, argv, screen, chat)) return rc;
  clchat::app::add_chat_options(app, chat);
  clchat::app::add_screen_options(app, screen);
  clchat::app::add_run_command(app, chat.engine.switches);
  clchat::app::add_tokenize_command(app);
  clchat::app::add_template_command(app);
  clchat::app::add_info_command(app);
  clchat::app::add_devices_command(app);
  clchat::app::add_bench_command(app, chat.engine.switches);
  clchat::app::add_synth_command(app);
  clchat::app::add_perplexity_command(app, chat.engine.switches);
  clchat::app::add_config_to_subcommands(app, screen);
  try {
    app.parse(argc, argv);
    if (app.get_subcommands().empty()) return clchat::app::run_interactive(chat, screen);
  } catch (const CLI::CallForHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForAllHelp& e) {
    return app.exit(e);
  } catch (const CLI::CallForVersion& e) {
    return app.exit(e);
  } catch (const clchat::app::ExitStatus& e) {
    return e.code;  // the command has said why
  } catch (const CLI::ParseError& e) {
    std::fprintf(stderr, "clchat: %s\n", e.what());
    return 2;
  } catch (const clchat::app::UsageError& e) {
    std::fprintf(stderr, "clchat: %s\n", e.what());
    return 2;
  } catch (const clchat::GgufError& e) {
    std::fprintf(stderr, "clchat: %s\n", e.what());
    return 2;
  } catch (const clchat::ClBuildError& e) {
    // The whole compiler log goes to the log file, the first error to stderr.
    const auto log_path = clchat::config::default_log_path();
    if (clchat::config::start_file_log(log_path, "info")) {
      spdlog::error("{}; build log:\n{}", e.what(), e.log());
      spdlog::default_logger()->flush();
      std::fprintf(stderr, "clchat: %s (build log in %s)\n", e.what(), log_path.c_str());
    } else {
      std::fprintf(stderr, "clchat: %s\n", e.what());
    }
    return 1;
  } catch (const clchat::NoDeviceError& e) {
    std::fprintf(stderr, "clchat: %s\n", e.what());
    return 1;
  } catch (const std::exception& e) {
    std::fprintf(stderr, "clchat: %s\n", e.what());
    return 1;
  }
  return 0;
}
