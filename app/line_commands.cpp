// Turns and commands of line mode (see line_commands.h).
#include "app/line_commands.h"

#include <atomic>
#include <csignal>
#include <variant>

#include "app/cmd_chat.h"
#include "ui/commands.h"
#include "ui/show.h"

namespace clchat::app {

namespace {

std::atomic<bool> g_interrupted{false};
extern "C" void on_sigint(int) { g_interrupted = true; }

// SIGINT cancels the reply while this lives; the default (quit) otherwise.
class CancelOnSigint {
 public:
  CancelOnSigint() {
    g_interrupted = false;
    struct sigaction sa {};
    sa.sa_handler = on_sigint;
    sigemptyset(&sa.sa_mask);
    sigaction(SIGINT, &sa, &old_);
  }
  ~CancelOnSigint() { sigaction(SIGINT, &old_, nullptr); }
  CancelOnSigint(const CancelOnSigint&) = delete;
  CancelOnSigint& operator=(const CancelOnSigint&) = delete;

 private:
  struct sigaction old_ {};
};

// Streams one reply until TurnFinished and returns it; `failed` is set when
// the turn failed (its error is printed).
ev::TurnFinished stream_reply(LineChat& chat, bool& failed) {
  CancelOnSigint sigint;
  bool started = false;  // a non-space character has been printed
  Event e;
  for (;;) {
    if (g_interrupted.exchange(false)) chat.engine.cancel();
    if (!chat.engine.wait(e, std::chrono::milliseconds(100))) continue;
    if (auto* t = std::get_if<ev::TokenText>(&e)) {
      std::string_view piece = t->piece;
      if (!started) {
        const size_t at = piece.find_first_not_of(" \t\r\n");
        piece = at == std::string_view::npos ? std::string_view() : piece.substr(at);
        started = !piece.empty();
      }
      // (An empty view's data() may be null, which fwrite must not get.)
      if (!piece.empty()) std::fwrite(piece.data(), 1, piece.size(), chat.out);
      std::fflush(chat.out);
    } else if (auto* s = std::get_if<ev::Stats>(&e)) {
      if (!s->live) chat.last_stats = *s;
    } else if (auto* x = std::get_if<ev::Error>(&e)) {
      std::fprintf(chat.err, "clchat: %s\n", x->message.c_str());
      failed = true;
    } else if (auto* n = std::get_if<ev::Notice>(&e)) {
      std::fprintf(chat.err, "clchat: %s\n", n->message.c_str());
    } else if (auto* c = std::get_if<ev::ContextTrimmed>(&e)) {
      std::fprintf(chat.err, "clchat: context full: dropped the %d oldest turns (%d tokens)\n",
                   c->turns_dropped, c->tokens_dropped);
    } else if (auto* f = std::get_if<ev::TurnFinished>(&e)) {
      std::fputs("\n", chat.out);
      std::fflush(chat.out);
      if (chat.verbose) std::fprintf(chat.err, "%s\n", format_stats_line(chat.last_stats).c_str());
      return *f;
    }
  }
}

// A reply the engine keeps in its conversation (a failed turn is undone).
bool kept(const ev::TurnFinished& f) {
  return f.reason != ev::FinishReason::Error &&
         !(f.reason == ev::FinishReason::ContextFull && f.reply.empty());
}

void print_lines(std::FILE* f, const std::vector<std::string>& lines) {
  for (const auto& l : lines) std::fprintf(f, "%s\n", l.c_str());
}

bool fail(LineChat& chat, const std::string& message) {
  std::fprintf(chat.err, "clchat: %s\n", message.c_str());
  return false;
}

bool run_turn(LineChat& chat, const std::string& text) {
  chat.engine.post(cmd::SubmitTurn{text});
  bool failed = false;
  const ev::TurnFinished f = stream_reply(chat, failed);
  auto& turns = chat.conversation.turns;
  if (kept(f)) {
    turns.push_back({Role::User, text, false});
    turns.push_back({Role::Assistant, f.reply, f.reason == ev::FinishReason::Cancelled});
  }
  return !failed;
}

bool regenerate(LineChat& chat) {
  auto& turns = chat.conversation.turns;
  if (turns.empty() || turns.back().role != Role::Assistant) {
    return fail(chat, "/regen: no reply to regenerate");
  }
  chat.engine.post(cmd::Regenerate{});
  bool failed = false;
  const ev::TurnFinished f = stream_reply(chat, failed);
  // A failed regeneration keeps the old reply, in the engine as here.
  if (kept(f)) turns.back() = {Role::Assistant, f.reply, f.reason == ev::FinishReason::Cancelled};
  return !failed;
}

// One parsed line (ui::Input's alternatives).
bool run(LineChat& chat, const auto& c) {
  using T = std::decay_t<decltype(c)>;
  namespace command = ui::command;
  if constexpr (std::is_same_v<T, ui::Nothing>) {
    return true;
  } else if constexpr (std::is_same_v<T, ui::Message>) {
    return run_turn(chat, c.text);
  } else if constexpr (std::is_same_v<T, command::Help>) {
    print_lines(chat.err, ui::help_lines());
  } else if constexpr (std::is_same_v<T, command::Clear>) {
    chat.conversation.turns.clear();
    chat.engine.post(cmd::Clear{});
  } else if constexpr (std::is_same_v<T, command::System>) {
    if (c.text.empty()) {
      std::fprintf(chat.err, "system prompt: %s\n", chat.conversation.system.c_str());
    } else {
      chat.conversation.system = c.text;
      chat.engine.post(cmd::SetSystemPrompt{c.text});
    }
  } else if constexpr (std::is_same_v<T, command::Regen>) {
    return regenerate(chat);
  } else if constexpr (std::is_same_v<T, command::Save>) {
    const auto paths = ui::save_paths(c.path);
    ui::write_file(paths.markdown, ui::to_markdown(chat.conversation));
    ui::write_file(paths.json, ui::to_json(chat.conversation));
  } else if constexpr (std::is_same_v<T, command::Load>) {
    const ui::Conversation loaded = ui::read_conversation(ui::load_path(c.path));
    std::vector<Turn> turns;
    for (const auto& t : loaded.turns) turns.push_back({t.role, t.text});
    chat.engine.post(cmd::LoadConversation{loaded.system, std::move(turns)});
    chat.conversation.system = loaded.system;
    chat.conversation.turns = loaded.turns;
  } else if constexpr (std::is_same_v<T, command::Set>) {
    ui::apply_set(chat.sampling, c, chat.from_model);
    chat.engine.post(cmd::SetSampling{chat.sampling});
  } else if constexpr (std::is_same_v<T, command::SetGreedy>) {
    chat.sampling.temperature = 0;
    chat.from_model.temperature = false;
    chat.engine.post(cmd::SetSampling{chat.sampling});
  } else if constexpr (std::is_same_v<T, command::Stats>) {
    std::fprintf(chat.err, "%s\n", format_stats_line(chat.last_stats).c_str());
  } else if constexpr (std::is_same_v<T, command::Show>) {
    print_lines(chat.err, ui::show_lines(chat.ready, chat.conversation.system, chat.sampling,
                                         chat.from_model));
  } else if constexpr (std::is_same_v<T, command::Debug>) {
    return fail(chat, "/debug needs the chat screen (its panel shows the readback)");
  } else if constexpr (std::is_same_v<T, command::Quit>) {
    chat.quit = true;
  } else if constexpr (std::is_same_v<T, command::Invalid>) {
    return fail(chat, c.hint);
  }
  return true;
}

}  // namespace

bool handle_line(LineChat& chat, const std::string& line) {
  try {
    return std::visit([&](const auto& input) { return run(chat, input); }, ui::parse_input(line));
  } catch (const ui::ConversationFileError& e) {
    return fail(chat, e.what());
  }
}

}  // namespace clchat::app
