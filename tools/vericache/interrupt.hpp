// SIGINT, SIGTERM and SIGHUP in the CLI: the process stops (no request is admitted
// after the signal, requests in flight are abandoned), deletes the disk tier's
// scratch files and private directories (kvtiers/scratch_registry.hpp) and exits
// with status 128 + the signal number (130, 143, 129).
#pragma once

namespace vc::cli {

/// Installs the handlers; call once, before any work. The handler itself only
/// writes the signal number to a pipe; a watcher thread reads it, deletes the
/// scratch and calls _exit. A second signal while that runs deletes the scratch
/// from the handler (async-signal-safe) and exits at once.
void install_interrupt_handlers();

}  // namespace vc::cli
