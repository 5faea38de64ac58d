// ThreadSanitizer defaults of the test_train executable (nothing in other builds).
//
// intercept_send=0: the peers of a test run in one process and sum gradients with the
// dense ring allreduce over loopback TCP, whose allgather writes each final chunk over
// the bytes this peer sent from in the reduce-scatter. That the kernel's read of them
// inside sendmsg is over before the final chunk arrives is proved by the chunk itself
// (it carries this peer's contribution, so the successor took the whole message), an
// order that travels through sockets ThreadSanitizer cannot see: it reported the
// sendmsg read (io thread) and the in-place recv (the predecessor link's reader thread)
// as a race. Every access by our own threads stays checked; only the kernel's read
// inside sendmsg is not counted (as in tests/collective/tcp_allreduce_test.cc).
//
// called_from_lib:libdnnl.so.2: oneDNN is a prebuilt library without TSan
// instrumentation. When the peers' threads build their first models at once, TSan saw
// its primitive cache's lazily made lock and cache keys only through the calls it
// intercepts (operator new on one thread, pthread_rwlock_rdlock and memcmp on another),
// not the synchronisation oneDNN does inside: reports about oneDNN's own memory. Its
// accesses to our buffers were never visible (not instrumented); ours stay checked.
// (Run with OMP_NUM_THREADS=1: libgomp's threads are not instrumented either.)
#if defined(__SANITIZE_THREAD__)
extern "C" const char* __tsan_default_options() { return "intercept_send=0"; }
extern "C" const char* __tsan_default_suppressions() { return "called_from_lib:libdnnl.so.2\n"; }
#endif
