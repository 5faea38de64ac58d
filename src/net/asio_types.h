// The Asio types that net/ headers name (sockets, buffers, executors, error codes), and
// nothing more of Asio: every source that includes tcp_node.h or tcp_ring.h parses this,
// so the whole of asio.hpp (~2x the parse time) stays in the few .cc files that use it.
//
// Asio is built as a separate library (ASIO_SEPARATE_COMPILATION, set by CMake for every
// target that links rt_net): its non-template code is compiled once, in asio_impl.cc,
// instead of in every translation unit that includes it.
#pragma once

// A libstdc++ header must come before Asio's: Asio decides between aligned_alloc and
// operator new from _GLIBCXX_HAVE_ALIGNED_ALLOC, and translation units that decide
// differently pair malloc with delete (AddressSanitizer: alloc-dealloc-mismatch).
#include <cstddef>
#ifndef ASIO_STANDALONE
#define ASIO_STANDALONE 1
#endif
#ifndef ASIO_SEPARATE_COMPILATION
#error "ASIO_SEPARATE_COMPILATION must be defined (CMake sets it on rt_net's users)"
#endif

#include <asio/any_io_executor.hpp>
#include <asio/buffer.hpp>
#include <asio/error.hpp>
#include <asio/error_code.hpp>
#include <asio/ip/tcp.hpp>
