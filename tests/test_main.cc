// The doctest main shared by every test executable (tests/<layer>/ -> test_<layer>).
#define DOCTEST_CONFIG_IMPLEMENT_WITH_MAIN
#include <doctest/doctest.h>
