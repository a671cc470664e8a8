// The engine thread: one thread owns the OpenCL runtime, the model, the
// backend and the chat session; callers talk to it only through a queue of
// commands (messages.h) and read its events back. Nothing here exposes
// OpenCL, so the UI includes this header alone.
//
//   Engine engine(options);            // starts the thread, which loads the model
//   engine.post(cmd::SubmitTurn{"hi"});
//   Event e;
//   while (engine.wait(e, 100ms)) ...  // Ready, TokenText..., Stats, TurnFinished
//   engine.cancel();                   // stops generation within one token
//
// Every failure inside the thread becomes an Error event (LoadFailed while
// loading) and the thread keeps running. Commands are processed in order, one
// at a time; cancel() is not queued: each posted turn (SubmitTurn, Regenerate)
// gets a number, and cancel() cancels every turn posted before it, running or
// still queued (the generation loop checks between tokens). A turn posted
// after a cancel is not affected.
#pragma once

#include <chrono>
#include <memory>

#include "engine/messages.h"

namespace clchat {

class Engine {
 public:
  // Starts the thread; the first event is Ready or LoadFailed.
  explicit Engine(EngineOptions options);
  // Cancels any generation, drops the commands still queued, shuts the
  // thread down and joins it.
  ~Engine();
  Engine(const Engine&) = delete;
  Engine& operator=(const Engine&) = delete;

  void post(Command command);
  // Cancels every turn posted so far: the running one stops within one token,
  // queued ones end Cancelled after their first (thread-safe, not queued).
  void cancel();

  // Takes the oldest pending event; false when there is none.
  bool poll(Event& event);
  // Like poll, but waits up to `timeout` for one to arrive.
  bool wait(Event& event, std::chrono::milliseconds timeout);
  // A file descriptor that is readable while events are pending, for a UI
  // that poll()s it together with stdin. Owned by the engine; do not read it.
  int wake_fd() const;

  // False once the thread has ended (after Shutdown or LoadFailed).
  bool running() const;

 private:
  struct Impl;
  std::unique_ptr<Impl> impl_;
};

}  // namespace clchat
