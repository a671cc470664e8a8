// What runs on the engine thread (engine.h): the OpenCL runtime, the model,
// the backend and the chat session, and the handling of each command. Kept
// apart from engine.cpp so the queue code stays free of OpenCL. Internal to
// the engine: callers use engine.h.
#pragma once

#include <atomic>
#include <memory>

#include "engine/chat/session.h"
#include "engine/cl/runtime.h"
#include "engine/messages.h"
#include "engine/model/backend.h"
#include "engine/model/model.h"
#include "engine/tokenizer/tokenizer.h"

namespace clchat {

class EventSink {
 public:
  virtual ~EventSink() = default;
  virtual void emit(Event event) = 0;
};

class Worker {
 public:
  // Loads everything and emits Ready (and Notices); throws on failure.
  // Turns numbered up to `cancelled_upto` are cancelled.
  Worker(const EngineOptions& options, EventSink& sink,
         const std::atomic<uint64_t>& cancelled_upto);
  ~Worker();
  // `turn`: the command's turn number (Engine::post), 0 when not a turn.
  void handle(const Command& command, uint64_t turn);

 private:
  void run_turn(bool regenerate, const std::string& text, uint64_t turn);
  TurnHooks hooks(uint64_t turn);
  ev::Stats stats(const TurnResult& r, bool live) const;
  // The model's facts for /show (architecture, size, types).
  void describe_model(ev::Ready& ready) const;
  void emit_layer_timings();
  void emit_debug();

  EngineOptions options_;
  EventSink& sink_;
  const std::atomic<uint64_t>& cancelled_upto_;
  Model model_;
  std::unique_ptr<Tokenizer> tokenizer_;
  std::unique_ptr<ClRuntime> runtime_;
  std::unique_ptr<Backend> backend_;
  std::unique_ptr<ChatSession> session_;
  bool debug_ = false;
  bool profiling_ = false;
  TurnResult last_;  // for QueryStats
};

}  // namespace clchat
