// Status plumbing shared by every layer: errors are absl::Status values, never
// exceptions across layers (STYLE: LevelDB). These macros keep call sites short.
#pragma once

#include "absl/status/status.h"
#include "absl/status/statusor.h"

#define RT_CONCAT_INNER(a, b) a##b
#define RT_CONCAT(a, b) RT_CONCAT_INNER(a, b)

// Evaluates `expr` (an absl::Status); returns it from the enclosing function if not OK.
#define RETURN_IF_ERROR(expr)                  \
  do {                                         \
    ::absl::Status rt_status_ = (expr);        \
    if (!rt_status_.ok()) return rt_status_;   \
  } while (0)

// `ASSIGN_OR_RETURN(auto x, MakeX());` unwraps an absl::StatusOr or returns its error.
#define ASSIGN_OR_RETURN(lhs, expr) \
  RT_ASSIGN_OR_RETURN_IMPL(RT_CONCAT(rt_statusor_, __LINE__), lhs, expr)
#define RT_ASSIGN_OR_RETURN_IMPL(tmp, lhs, expr) \
  auto tmp = (expr);                             \
  if (!tmp.ok()) return tmp.status();            \
  lhs = std::move(tmp).value()
