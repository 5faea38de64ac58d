// Routes of the status pages (see status_site.h).
#include "observe/status_site.h"

#include "observe/dashboard_page.h"
#include "observe/prometheus_text.h"
#include "observe/status_json.h"

namespace rt::observe {

HttpHandler StatusSiteHandler(std::shared_ptr<StatusBoard> board) {
  return [board](const HttpRequest& req) {
    HttpResponse r;
    if (req.path == "/metrics") {
      r.content_type = "text/plain; version=0.0.4; charset=utf-8";
      r.body = PrometheusText(board->Snapshot());
    } else if (req.path == "/api/status") {
      r.content_type = "application/json";
      StatusJsonOptions o;
      o.history = req.query.find("history=0") == std::string::npos;
      r.body = StatusJson(board->Snapshot(), o);
    } else if (req.path == "/" || req.path == "/index.html") {
      r.content_type = "text/html; charset=utf-8";
      // Nothing from another host may load: the machines may have no internet, and a
      // status page should not call out.
      r.extra_headers =
          "Content-Security-Policy: default-src 'none'; script-src 'unsafe-inline'; "
          "style-src 'unsafe-inline'; connect-src 'self'; img-src data:\r\n";
      r.body = DashboardPage();
    } else {
      r.status = 404;
      r.body = "404 Not Found: this peer serves /, /metrics and /api/status\n";
    }
    return r;
  };
}

}  // namespace rt::observe
