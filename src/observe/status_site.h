// The status pages of a peer (`train --http`): `/` the dashboard (dashboard_page.h),
// `/metrics` Prometheus text (prometheus_text.h), `/api/status` JSON (status_json.h;
// `?history=0` leaves the curves out). Read-only; anything else is 404.
#pragma once

#include <memory>

#include "observe/http_server.h"
#include "observe/status_board.h"

namespace rt::observe {

// The handler of those routes over `board` (kept alive by the handler).
HttpHandler StatusSiteHandler(std::shared_ptr<StatusBoard> board);

}  // namespace rt::observe
