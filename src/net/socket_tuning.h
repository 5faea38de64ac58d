// What a ring socket asks of the kernel for links over the internet (long round trips,
// random loss): receive and send buffers that can hold a bandwidth-delay product, and a
// congestion control that holds its rate under random loss.
//
// Buffers: a connection can have at most one window (receive buffer) and one send buffer
// of bytes in flight, so its rate is at most buffer / RTT: 4 MB at 100 ms RTT is 320
// Mbit/s. The kernel caps what a socket may ask: SO_SNDBUF/SO_RCVBUF at net.core.wmem_max
// / rmem_max (208 KB on a stock kernel: 17 Mbit/s at 100 ms!), and its own autotuning at
// the last field of net.ipv4.tcp_wmem / tcp_rmem (4 MB / 6 MB on stock kernels). So a
// buffer is set explicitly only where that beats autotuning: with CAP_NET_ADMIN
// (SO_*BUFFORCE, any size), or when the core limit allows more than autotuning would;
// otherwise the socket autotunes, and a message once names the sysctl that would raise
// the cap. A buffer size is a cap, not memory: the kernel uses what is queued.
//
// Congestion control: `congestion` (the ring asks for "bbr": cubic and reno halve their
// window at every loss, so 0.1% random loss at 80 ms RTT holds them far below 100
// Mbit/s; bbr paces at the measured bottleneck rate). Where the kernel refuses it (the
// module not loaded, or not in net.ipv4.tcp_allowed_congestion_control for a process
// without CAP_NET_ADMIN), the socket keeps the kernel's default and a message once says
// which one and how to allow bbr.
#pragma once

#include <string>

namespace rt::net {

// Applies the buffer policy above to `fd` (a connected socket or a listener, whose
// accepted sockets inherit it) for `want_bytes` per direction; 0 = leave the kernel's.
void TuneSocketBuffers(int fd, int want_bytes);

// Asks for congestion control `name` on `fd` ("" = the kernel's default); false if the
// kernel refused (logged once per process and name).
bool SetCongestionControl(int fd, const std::string& name);

}  // namespace rt::net
