// SIGINT, SIGTERM and SIGHUP in the CLI: the process stops (no request is admitted
// after the signal, requests in flight are abandoned), deletes the disk tier's
// scratch files and private directories (kvtiers/scratch_registry.hpp) and exits
// with status 128 + the signal number (130, 143, 129).
#pragma once

namespace vc::cli {

/// Installs the handling; call once, before any work. The signals are blocked in the
/// calling thread (call it before making any other thread) and so in every thread;
/// a watcher thread takes the first with sigwait, deletes the scratch and calls
/// _exit. A second signal while that runs deletes the scratch from a handler
/// (async-signal-safe) and exits at once.
void install_interrupt_handlers();

/// A command's own handling (serve drains on SIGINT/SIGTERM): the watcher calls
/// hook(signo) for each signal it takes; true means handled (the watcher waits for
/// the next one), false the default (delete the scratch, exit). Everything the hook
/// reads that was set before this call is visible to it.
using InterruptHook = bool (*)(int signo);
void set_interrupt_hook(InterruptHook hook);

/// When a signal came: waits for the watcher to exit the process (so a command that
/// ended because its scratch was deleted under it does not exit 0 or print errors
/// first). Otherwise returns at once. main calls it before leaving.
void wait_if_interrupted();

/// In a forked child, which has no watcher thread: the signals are unblocked and the
/// handler deletes the child's scratch and exits at once.
void handle_interrupts_without_watcher();

}  // namespace vc::cli
