// `ringtrain --version`: what this binary is and which compute paths this CPU gets.
#pragma once

namespace rt::cli {

// Prints the version, the commit, and the kernel paths of this CPU (ours and oneDNN's,
// RINGTRAIN_ISA and ONEDNN_MAX_CPU_ISA applied) and how bf16 runs; returns the exit code.
int PrintVersion();

}  // namespace rt::cli
