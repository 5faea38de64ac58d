// Asio's non-template implementation, compiled once for the whole program
// (ASIO_SEPARATE_COMPILATION: the other sources see only declarations). See asio_types.h.
#include "net/asio_types.h"  // first: the same Asio configuration as every other source

#include <asio/impl/src.hpp>
