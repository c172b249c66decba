#include "net/errors.h"

#include <asio/error.hpp>
#include <asio/ssl/error.hpp>
#include <fmt/format.h>

namespace cb::net {

Status to_status(const std::error_code& ec, std::string_view what) {
  if (!ec) return ok_status();
  std::string msg = fmt::format("{}: {}", what, ec.message());
  if (ec == asio::error::operation_aborted) return cancelled(msg);
  if (ec == asio::error::timed_out) return deadline_exceeded(msg);
  if (ec == asio::error::eof || ec == asio::error::connection_reset ||
      ec == asio::error::connection_refused || ec == asio::error::connection_aborted ||
      ec == asio::error::broken_pipe || ec == asio::error::host_unreachable ||
      ec == asio::error::network_unreachable || ec == asio::error::not_connected ||
      ec == asio::error::shut_down || ec == asio::ssl::error::stream_truncated ||
      ec == std::errc::no_such_file_or_directory)
    return unavailable(msg);
  if (ec.category() == asio::error::get_ssl_category()) return unavailable(msg);
  return unknown_error(msg);
}

}  // namespace cb::net
