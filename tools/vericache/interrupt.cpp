// The CLI's signal handling: self-pipe from an async-signal-safe handler to a
// watcher thread that cleans up and exits (interrupt.hpp).
#include "tools/vericache/interrupt.hpp"

#include <fcntl.h>
#include <pthread.h>
#include <unistd.h>

#include <atomic>
#include <cerrno>
#include <csignal>
#include <cstring>
#include <string>
#include <thread>

#include <spdlog/spdlog.h>

#include "kernels/error.hpp"
#include "kvtiers/scratch_registry.hpp"

namespace vc::cli {

namespace {

int g_pipe[2] = {-1, -1};
std::atomic<int> g_signals{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");

// Async-signal-safe: an atomic, write, and on a second signal the registry's
// removal and _exit.
void on_signal(int signo) {
  const int saved_errno = errno;
  if (g_signals.fetch_add(1) == 0) {
    const unsigned char b = static_cast<unsigned char>(signo);
    if (::write(g_pipe[1], &b, 1) == 1) {
      errno = saved_errno;
      return;
    }
  }
  remove_all_scratch();
  ::_exit(128 + signo);
}

sigset_t interrupt_signals() {
  sigset_t set;
  sigemptyset(&set);
  for (int s : {SIGINT, SIGTERM, SIGHUP}) sigaddset(&set, s);
  return set;
}

const char* signal_name(int signo) {
  switch (signo) {
    case SIGINT: return "SIGINT";
    case SIGTERM: return "SIGTERM";
    case SIGHUP: return "SIGHUP";
    default: return "a signal";
  }
}

void watch() {
  // The one thread that takes these signals (install_interrupt_handlers blocks them
  // in every other thread).
  sigset_t ours = interrupt_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
  unsigned char b = 0;
  for (;;) {
    const ssize_t n = ::read(g_pipe[0], &b, 1);
    if (n == 1) break;
    if (n < 0 && errno == EINTR) continue;
    return;  // the pipe is gone: nothing to watch
  }
  const int signo = b;
  const size_t dirs = remove_all_scratch();
  spdlog::warn("interrupted by {}: stopped, removed {} disk tier scratch director{}, exit status {}",
               signal_name(signo), dirs, dirs == 1 ? "y" : "ies", 128 + signo);
  spdlog::default_logger()->flush();
  ::_exit(128 + signo);
}

}  // namespace

void install_interrupt_handlers() {
  if (::pipe2(g_pipe, O_CLOEXEC) != 0)
    throw Error(std::string("cannot create the signal pipe: ") + std::strerror(errno));
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP})
    if (::sigaction(s, &sa, nullptr) != 0)
      throw Error(std::string("cannot install the handler for ") + signal_name(s) + ": " +
                  std::strerror(errno));
  // Blocked here, so in every thread made from now on; the watcher unblocks them, so
  // the handler always runs on the watcher while it waits in read(). Otherwise the
  // kernel may pick a thread parked in a raw futex wait (a std::future), and a runtime
  // that defers handlers to a safe point (ThreadSanitizer does) runs it only when that
  // wait ends: minutes later. A signal arriving before the watcher starts stays pending.
  sigset_t ours = interrupt_signals();
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &ours, nullptr); rc != 0)
    throw Error(std::string("cannot block the interrupt signals: ") + std::strerror(rc));
  std::thread(watch).detach();
}

void wait_if_interrupted() {
  if (g_signals.load() == 0) return;
  for (;;) ::pause();  // the watcher (or the handler) exits with 128 + signo
}

void handle_interrupts_without_watcher() {
  g_signals.store(1);  // as after a first signal: the handler cleans up and exits itself
  sigset_t ours = interrupt_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
}

}  // namespace vc::cli
