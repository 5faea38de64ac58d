// The Asio types that net/ headers name (sockets, buffers, executors, error codes), and
// nothing more of Asio: every source that includes tcp_node.h or tcp_ring.h parses this,
// so the whole of asio.hpp (~2x the parse time) stays in the few .cc files that use it.
//
// Asio is built as a separate library (ASIO_SEPARATE_COMPILATION, set by CMake for every
// target that links rt_net): its non-template code is compiled once, in asio_impl.cc,
// instead of in every translation unit that includes it. Measured (GCC 12, CPU seconds of
// 16 sources of src/ that include Asio, compiled side by side before and after): release
// 111 -> 86, ASan+UBSan 151 -> 122; asio_impl.cc itself costs 7.5 (release) and 15 (ASan).
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
