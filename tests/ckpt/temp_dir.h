// TempDir for the checkpoint tests: the shared one in tests/temp_dir.h.
#pragma once

#include "../temp_dir.h"
