// Stop and reload requests from signals, read by the training loop at safe points.
//
// SIGTERM and SIGINT ask for a clean stop: the peers stop together at a step
// boundary, the leader checkpoints and every peer exits 0 (train/elastic_reducer.h).
// Another SIGTERM/SIGINT more than 3 s after the first exits at once (status
// 128 + signal); one within 3 s is taken as the same request (Ctrl-C reaches both
// tools/local-ring and the peers, and local-ring forwards SIGTERM). SIGHUP asks to re-read
// the hosts file. The handlers only set atomic flags; everything else happens on
// the training thread.
#pragma once

namespace rt::train {

// Installs the handlers (idempotent). Without it the flags stay false.
void InstallStopSignalHandlers();
// True once SIGTERM or SIGINT arrived (or RequestStop was called).
bool StopRequested();
// The signal that asked to stop (SIGTERM, SIGINT; 0 if none or RequestStop).
int StopSignal();
// Sets the stop flag as a signal would (tests).
void RequestStop();
// Clears the stop flag (tests).
void ClearStopRequest();
// True once per SIGHUP received since the last call.
bool TakeHostsReloadRequest();

}  // namespace rt::train
