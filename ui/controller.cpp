// Event and command handling for the chat screen (see controller.h).
#include "ui/controller.h"

#include <spdlog/spdlog.h>

#include <cstdio>

#include "config/xdg.h"
#include "ui/commands.h"
#include "ui/show.h"

namespace clchat::ui {

namespace {

std::string stats_text(const ev::Stats& st) {
  char buf[256];
  std::snprintf(buf, sizeof buf,
                "prefill %d tokens at %.1f tok/s · decode %d tokens at %.1f tok/s · TTFT %.1f ms · "
                "cache %d/%d",
                st.prefill_tokens, st.prefill_tok_s, st.decode_tokens, st.decode_tok_s, st.ttft_ms,
                st.cache_used, st.cache_capacity);
  return buf;
}

std::string join_lines(const std::vector<std::string>& lines) {
  std::string out;
  for (const auto& l : lines) out += (out.empty() ? "" : "\n") + l;
  return out;
}

}  // namespace

void Controller::set_hint(std::string text, Style style, std::chrono::seconds duration) {
  s_.hint = std::move(text);
  s_.hint_style = style;
  s_.hint_until = std::chrono::steady_clock::now() + duration;
}

void Controller::on_event(const Event& event) {
  std::visit(
      [&](const auto& e) {
        using T = std::decay_t<decltype(e)>;
        if constexpr (std::is_same_v<T, ev::Ready>) {
          s_.session = {true,      false,     e.model_name, e.quant, e.device_name,
                        e.backend, e.n_layer, e.n_ctx,      e,       {}};
          // The engine's sampling (the model's recommendation included),
          // unless a /set before Ready has already replaced it there.
          if (!s_.sampling_set) {
            s_.sampling = e.sampling;
            s_.sampling_from_model = e.from_model;
          }
          s_.perf.device = e.device_name;
          s_.perf.n_layer = e.n_layer;
          s_.perf.stats.cache_capacity = e.n_ctx;
          s_.conversation.model = e.model_name;
          if (s_.conversation.turns.empty()) s_.conversation.system = e.system_prompt;
          s_.transcript.add_before_turns(
              EntryKind::Info, e.model_name + " (" + e.quant + ", " + std::to_string(e.n_layer) +
                                   " layers, " + std::to_string(e.n_ctx) + " context) on " +
                                   e.device_name + " · /help lists the commands");
        } else if constexpr (std::is_same_v<T, ev::LoadFailed>) {
          s_.session.failed = true;
          s_.generating = false;
          s_.transcript.add(EntryKind::Error, "cannot load the model: " + e.message);
          set_hint("the model did not load; /quit leaves", Style::Warning, std::chrono::hours(1));
        } else if constexpr (std::is_same_v<T, ev::Loading>) {
          s_.session.stage = e.stage;
        } else if constexpr (std::is_same_v<T, ev::Error>) {
          s_.transcript.add(EntryKind::Error, e.message);
        } else if constexpr (std::is_same_v<T, ev::Notice>) {
          s_.transcript.add(EntryKind::Info, e.message);
        } else if constexpr (std::is_same_v<T, ev::PrefillProgress>) {
          s_.prefill = e;
          if (s_.cancel_requested) cancel_();
        } else if constexpr (std::is_same_v<T, ev::TokenText>) {
          s_.prefill = {};
          s_.transcript.append_reply(e.piece);
          if (s_.cancel_requested) cancel_();
        } else if constexpr (std::is_same_v<T, ev::TurnFinished>) {
          finish_turn(e);
        } else if constexpr (std::is_same_v<T, ev::Stats>) {
          s_.perf.on_stats(e);
          if (!e.live && s_.stats_requested) {
            s_.stats_requested = false;
            s_.transcript.add(EntryKind::Info, stats_text(e));
          }
        } else if constexpr (std::is_same_v<T, ev::LayerTimings>) {
          s_.perf.on_layers(e);
        } else if constexpr (std::is_same_v<T, ev::DebugStats>) {
          s_.perf.on_debug(e);
        } else if constexpr (std::is_same_v<T, ev::ContextTrimmed>) {
          s_.transcript.add(EntryKind::Info, "context full: the oldest " +
                                                 std::to_string(e.turns_dropped) +
                                                 " turns no longer reach the model");
        }
      },
      event);
}

void Controller::finish_turn(const ev::TurnFinished& f) {
  s_.generating = false;
  s_.cancel_requested = false;
  s_.prefill = {};
  const bool cancelled = f.reason == ev::FinishReason::Cancelled;
  std::string note;
  if (cancelled) note = "stopped";
  if (f.reason == ev::FinishReason::MaxTokens) note = "max_tokens reached";
  if (f.reason == ev::FinishReason::ContextFull) note = "context full";
  // A failed turn leaves the engine's conversation as it was: drop our copy of
  // the question too, so /save and the autosave match what the model saw.
  const bool kept = f.reason != ev::FinishReason::Error &&
                    !(f.reason == ev::FinishReason::ContextFull && f.reply.empty());
  if (!kept && regen_removed_) {
    // A failed /regen: the engine kept the old reply, and so do we.
    note = "not kept: " + std::string(finish_reason_name(f.reason)) + "; the previous reply stays";
    s_.conversation.turns.push_back(*regen_removed_);
  } else if (!kept) {
    note = "not kept: " + std::string(finish_reason_name(f.reason));
    if (!s_.conversation.turns.empty() && s_.conversation.turns.back().role == Role::User) {
      // Back into the input line, to be shortened or sent again.
      s_.input_back = ReturnedInput{s_.conversation.turns.back().text, false};
      s_.conversation.turns.pop_back();
      set_hint("the message is back in the input line", Style::Warning, std::chrono::seconds(10));
    }
  } else {
    s_.conversation.turns.push_back({Role::Assistant, f.reply, cancelled});
  }
  regen_removed_.reset();
  s_.transcript.finish_reply(note);
  autosave();
}

void Controller::autosave() {
  if (s_.autosave.empty() || s_.conversation.turns.empty()) return;
  try {
    const auto dir = s_.autosave.parent_path();
    if (!config::ensure_dir(dir)) throw ConversationFileError("cannot create " + dir.string());
    write_file(s_.autosave, to_json(s_.conversation));
    if (!s_.autosave_error.empty()) {
      s_.autosave_error.clear();
      set_hint("autosave works again: " + s_.autosave.string());
    }
  } catch (const std::exception& e) {
    // Said on the screen (the status bar keeps it), tried again after the
    // next turn; the whole conversation is written then.
    s_.autosave_error = e.what();
    spdlog::warn("autosave failed: {}", e.what());
    set_hint("autosave failed: " + s_.autosave_error +
                 " (tried again after each turn; /save FILE "
                 "saves elsewhere)",
             Style::Warning, std::chrono::seconds(30));
  }
}

bool Controller::busy(const char* what) {
  if (!s_.generating) return false;
  set_hint(std::string("wait for the reply (or Ctrl-C) before ") + what +
               "; the line is kept in the input",
           Style::Warning);
  s_.input_back = submitted_;
  return true;
}

void Controller::on_submit(const std::string& line, bool starts_with_paste) {
  submitted_ = {line, starts_with_paste};
  std::visit([&](const auto& input) { on_command(input); }, parse_input(line, starts_with_paste));
}

void Controller::on_command(const auto& c) {
  using T = std::decay_t<decltype(c)>;
  if constexpr (std::is_same_v<T, Nothing>) {
    return;
  } else if constexpr (std::is_same_v<T, Message>) {
    if (s_.session.failed) return set_hint("no model is loaded; /quit leaves", Style::Warning);
    if (busy("sending another message")) return;
    s_.transcript.add(EntryKind::User, c.text);
    s_.transcript.scroll_end();
    s_.conversation.turns.push_back({Role::User, c.text, false});
    s_.generating = true;
    post_(cmd::SubmitTurn{c.text});
  } else if constexpr (std::is_same_v<T, command::Help>) {
    s_.transcript.add(EntryKind::Info, join_lines(help_lines()));
  } else if constexpr (std::is_same_v<T, command::Clear>) {
    if (busy("/clear")) return;
    s_.transcript.clear();
    s_.conversation.turns.clear();
    if (!s_.autosave.empty()) s_.autosave = new_autosave_path();
    post_(cmd::Clear{});
    set_hint("new conversation");
  } else if constexpr (std::is_same_v<T, command::System>) {
    if (c.text.empty()) {
      s_.transcript.add(EntryKind::System, "system prompt: " + s_.conversation.system);
      return;
    }
    if (busy("/system")) return;
    s_.conversation.system = c.text;
    post_(cmd::SetSystemPrompt{c.text});
    s_.transcript.add(EntryKind::System, "system prompt: " + c.text);
    autosave();
  } else if constexpr (std::is_same_v<T, command::Regen>) {
    if (busy("/regen")) return;
    auto& turns = s_.conversation.turns;
    if (turns.empty() || turns.back().role != Role::Assistant) {
      return set_hint("no reply to regenerate", Style::Warning);
    }
    regen_removed_ = turns.back();
    turns.pop_back();
    s_.transcript.drop_last_reply();
    s_.transcript.scroll_end();
    s_.generating = true;
    post_(cmd::Regenerate{});
  } else if constexpr (std::is_same_v<T, command::Save>) {
    const auto paths = save_paths(c.path);
    try {
      write_file(paths.markdown, to_markdown(s_.conversation));
      write_file(paths.json, to_json(s_.conversation));
      set_hint("saved " + paths.markdown.string() + " and " + paths.json.string());
    } catch (const std::exception& e) {
      set_hint(e.what(), Style::Warning);
    }
  } else if constexpr (std::is_same_v<T, command::Load>) {
    if (busy("/load")) return;
    try {
      const auto path = load_path(c.path);
      restore(read_conversation(path), s_.autosave.empty() ? "" : new_autosave_path());
      set_hint("loaded " + path.string());
    } catch (const std::exception& e) {
      set_hint(e.what(), Style::Warning);
    }
  } else if constexpr (std::is_same_v<T, command::Set>) {
    apply_set(s_.sampling, c, s_.sampling_from_model);
    s_.sampling_set = true;
    post_(cmd::SetSampling{s_.sampling});
    set_hint("sampling: " + sampling_summary(s_.sampling));
  } else if constexpr (std::is_same_v<T, command::SetGreedy>) {
    s_.sampling.temperature = 0;
    s_.sampling_from_model.temperature = false;
    s_.sampling_set = true;
    post_(cmd::SetSampling{s_.sampling});
    set_hint("sampling: greedy");
  } else if constexpr (std::is_same_v<T, command::Stats>) {
    s_.stats_requested = true;
    post_(cmd::QueryStats{});
  } else if constexpr (std::is_same_v<T, command::Show>) {
    if (!s_.session.ready) return set_hint("the model is still loading", Style::Warning);
    s_.transcript.add(EntryKind::Info,
                      join_lines(show_lines(s_.session.facts, s_.conversation.system, s_.sampling,
                                            s_.sampling_from_model)));
  } else if constexpr (std::is_same_v<T, command::Debug>) {
    if (s_.debug != c.on) toggle_debug();
  } else if constexpr (std::is_same_v<T, command::Quit>) {
    s_.quit = true;
  } else if constexpr (std::is_same_v<T, command::Invalid>) {
    set_hint(c.hint, Style::Warning);
  }
}

void Controller::restore(const Conversation& c, const std::filesystem::path& autosave_path) {
  s_.conversation.system = c.system;
  s_.conversation.turns = c.turns;
  s_.autosave = autosave_path;
  std::vector<Turn> turns;
  for (const auto& t : c.turns) turns.push_back({t.role, t.text});
  post_(cmd::LoadConversation{c.system, std::move(turns)});
  s_.transcript.clear();
  if (!c.system.empty()) s_.transcript.add(EntryKind::System, "system prompt: " + c.system);
  for (const auto& t : c.turns) {
    if (t.role == Role::User) {
      s_.transcript.add(EntryKind::User, t.text);
    } else {
      s_.transcript.append_reply(t.text);
      s_.transcript.finish_reply(t.stopped ? "stopped" : "");
    }
  }
}

bool Controller::on_interrupt(std::chrono::steady_clock::time_point now) {
  if (s_.generating) {
    s_.cancel_requested = true;
    cancel_();
    s_.hint.clear();  // the hint line says "stopping…" until the turn ends
    return false;
  }
  if (now - s_.last_interrupt < std::chrono::seconds(2)) {
    s_.quit = true;
    return true;
  }
  s_.last_interrupt = now;
  set_hint("press Ctrl-C again to quit", Style::Warning, std::chrono::seconds(2));
  return true;
}

void Controller::toggle_debug() {
  s_.debug = !s_.debug;
  post_(cmd::SetDebug{s_.debug});
  if (!s_.debug) s_.perf.debug.reset();
  set_hint(std::string("debug readback ") + (s_.debug ? "on" : "off"));
}

}  // namespace clchat::ui
