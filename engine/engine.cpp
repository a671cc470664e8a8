// The engine thread. Impl holds two queues: commands in (mutex + condition
// variable, the thread blocks on it) and events out (mutex + an eventfd that
// is readable exactly while the queue is not empty, so a UI can poll() it).
// Everything that touches OpenCL, the model or the session lives in Worker,
// created and destroyed on the engine thread.
#include "engine/engine.h"

#include <poll.h>
#include <sys/eventfd.h>
#include <unistd.h>

#include <atomic>
#include <condition_variable>
#include <deque>
#include <mutex>
#include <stdexcept>
#include <thread>
#include <utility>

#include "engine/cl/build_error.h"
#include "engine/engine_worker.h"
#include "engine/gguf/gguf.h"

namespace clchat {

struct Engine::Impl : EventSink {
  std::mutex cmd_mutex;
  std::condition_variable cmd_cv;
  // Each command with its turn number (0 for commands that are not turns).
  std::deque<std::pair<Command, uint64_t>> commands;
  uint64_t turns_posted = 0;  // guarded by cmd_mutex

  std::mutex ev_mutex;
  std::deque<Event> events;
  int event_fd = -1;

  // Turns numbered up to this one are cancelled (Engine::cancel).
  std::atomic<uint64_t> cancelled_upto{0};
  std::atomic<bool> running{true};
  std::thread thread;

  void emit(Event event) override {
    std::lock_guard lock(ev_mutex);
    events.push_back(std::move(event));
    if (events.size() == 1) {
      const uint64_t one = 1;
      // Cannot fail short of a full counter, which one write per empty ->
      // non-empty transition never reaches.
      [[maybe_unused]] const ssize_t n = ::write(event_fd, &one, sizeof one);
    }
  }

  bool take(Event& event) {
    std::lock_guard lock(ev_mutex);
    if (events.empty()) return false;
    event = std::move(events.front());
    events.pop_front();
    if (events.empty()) {
      uint64_t count = 0;
      [[maybe_unused]] const ssize_t n = ::read(event_fd, &count, sizeof count);
    }
    return true;
  }

  std::pair<Command, uint64_t> next_command() {
    std::unique_lock lock(cmd_mutex);
    cmd_cv.wait(lock, [&] { return !commands.empty(); });
    auto c = std::move(commands.front());
    commands.pop_front();
    return c;
  }

  void run(const EngineOptions& options) {
    std::unique_ptr<Worker> worker;
    try {
      worker = std::make_unique<Worker>(options, *this, cancelled_upto);
    } catch (const GgufError& e) {
      emit(ev::LoadFailed{e.what(), true, {}});
      running = false;
      return;
    } catch (const ClBuildError& e) {
      emit(ev::LoadFailed{e.what(), false, e.log()});
      running = false;
      return;
    } catch (const std::exception& e) {
      emit(ev::LoadFailed{e.what(), false, {}});
      running = false;
      return;
    }
    for (;;) {
      auto [c, turn] = next_command();
      if (std::holds_alternative<cmd::Shutdown>(c)) break;
      try {
        worker->handle(c, turn);
      } catch (const std::exception& e) {
        emit(ev::Error{e.what()});
      }
    }
    worker.reset();  // releases OpenCL on the thread that created it
    running = false;
  }
};

Engine::Engine(EngineOptions options) : impl_(std::make_unique<Impl>()) {
  impl_->event_fd = ::eventfd(0, EFD_CLOEXEC | EFD_NONBLOCK);
  if (impl_->event_fd < 0) throw std::runtime_error("eventfd failed");
  impl_->thread =
      std::thread([impl = impl_.get(), options = std::move(options)] { impl->run(options); });
}

Engine::~Engine() {
  cancel();
  {
    // Queued turns would otherwise run before the Shutdown.
    std::lock_guard lock(impl_->cmd_mutex);
    impl_->commands.clear();
    impl_->commands.emplace_back(cmd::Shutdown{}, 0);
  }
  impl_->cmd_cv.notify_one();
  if (impl_->thread.joinable()) impl_->thread.join();
  ::close(impl_->event_fd);
}

void Engine::post(Command command) {
  {
    std::lock_guard lock(impl_->cmd_mutex);
    const bool turn = std::holds_alternative<cmd::SubmitTurn>(command) ||
                      std::holds_alternative<cmd::Regenerate>(command);
    impl_->commands.emplace_back(std::move(command), turn ? ++impl_->turns_posted : 0);
  }
  impl_->cmd_cv.notify_one();
}

void Engine::cancel() {
  std::lock_guard lock(impl_->cmd_mutex);
  impl_->cancelled_upto = impl_->turns_posted;
}

bool Engine::poll(Event& event) { return impl_->take(event); }

bool Engine::wait(Event& event, std::chrono::milliseconds timeout) {
  if (impl_->take(event)) return true;
  const auto deadline = std::chrono::steady_clock::now() + timeout;
  for (;;) {
    const auto left = std::chrono::duration_cast<std::chrono::milliseconds>(
        deadline - std::chrono::steady_clock::now());
    if (left.count() <= 0) return impl_->take(event);
    pollfd p{impl_->event_fd, POLLIN, 0};
    ::poll(&p, 1, int(left.count()));
    if (impl_->take(event)) return true;
  }
}

int Engine::wake_fd() const { return impl_->event_fd; }

bool Engine::running() const { return impl_->running; }

}  // namespace clchat
