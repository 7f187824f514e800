// The CLI's signal handling: a watcher thread takes the signals with sigwait, cleans
// up and exits (interrupt.hpp).
#include "tools/vericache/interrupt.hpp"

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

std::atomic<int> g_signals{0};
static_assert(std::atomic<int>::is_always_lock_free, "the signal handler needs lock-free atomics");
std::atomic<InterruptHook> g_hook{nullptr};

// Runs only for a second signal (on the watcher, once it has unblocked them) or in a
// forked child: async-signal-safe removal of the scratch, then _exit.
void on_signal(int signo) {
  g_signals.fetch_add(1);
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
  // The signals are blocked in every thread, this one too, so no handler runs for
  // the first one: sigwait takes it off the process's queue here, synchronously.
  // (A handler can be deferred: ThreadSanitizer runs it at the receiving thread's
  // next safe point, which a thread parked in read() or a futex never reaches.)
  sigset_t ours = interrupt_signals();
  int signo = 0;
  for (;;) {
    if (::sigwait(&ours, &signo) != 0) continue;
    // A command's own handling first (serve: the first SIGINT or SIGTERM drains).
    if (const InterruptHook hook = g_hook.load(std::memory_order_acquire); hook && hook(signo))
      continue;
    break;
  }
  g_signals.fetch_add(1);
  // From now on a second signal runs the handler here: it removes the scratch and
  // exits at once, should this removal hang.
  ::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
  const size_t dirs = remove_all_scratch();
  spdlog::warn("interrupted by {}: stopped, removed {} disk tier scratch director{}, exit status {}",
               signal_name(signo), dirs, dirs == 1 ? "y" : "ies", 128 + signo);
  spdlog::default_logger()->flush();
  ::_exit(128 + signo);
}

}  // namespace

void install_interrupt_handlers() {
  struct sigaction sa {};
  sa.sa_handler = on_signal;
  sigemptyset(&sa.sa_mask);
  sa.sa_flags = SA_RESTART;
  for (int s : {SIGINT, SIGTERM, SIGHUP})
    if (::sigaction(s, &sa, nullptr) != 0)
      throw Error(std::string("cannot install the handler for ") + signal_name(s) + ": " +
                  std::strerror(errno));
  // Blocked here, so in every thread made from now on (the watcher included, which
  // takes them with sigwait). A signal arriving before the watcher starts stays
  // pending until it does.
  sigset_t ours = interrupt_signals();
  if (const int rc = ::pthread_sigmask(SIG_BLOCK, &ours, nullptr); rc != 0)
    throw Error(std::string("cannot block the interrupt signals: ") + std::strerror(rc));
  std::thread(watch).detach();
}

void set_interrupt_hook(InterruptHook hook) { g_hook.store(hook, std::memory_order_release); }

void wait_if_interrupted() {
  if (g_signals.load() == 0) return;
  for (;;) ::pause();  // the watcher (or the handler) exits with 128 + signo
}

void handle_interrupts_without_watcher() {
  g_signals.store(1);  // the handler cleans up and exits at once
  sigset_t ours = interrupt_signals();
  ::pthread_sigmask(SIG_UNBLOCK, &ours, nullptr);
}

}  // namespace vc::cli
