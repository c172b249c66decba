#pragma once
// The only file that names Asio's completion token (house style H9). Every coroutine in
// cocoonbox uses these aliases, so no Asio call ever throws on an I/O error: results come back
// as (error_code, value...) tuples and are turned into Status by net/errors.h.

#include <asio.hpp>
#include <asio/experimental/as_tuple.hpp>
#include <asio/experimental/awaitable_operators.hpp>

#include <chrono>

namespace cb::net {

using Token = asio::experimental::as_tuple_t<asio::use_awaitable_t<>>;
constexpr Token kToken{};
using TcpSocket = Token::as_default_on_t<asio::ip::tcp::socket>;
using TcpAcceptor = Token::as_default_on_t<asio::ip::tcp::acceptor>;
using UnixSocket = Token::as_default_on_t<asio::local::stream_protocol::socket>;
using UnixAcceptor = Token::as_default_on_t<asio::local::stream_protocol::acceptor>;
using Timer = Token::as_default_on_t<asio::steady_timer>;
using Deadline = std::chrono::steady_clock::time_point;
using Executor = asio::any_io_executor;

// A deadline |d| from now.
inline Deadline after(std::chrono::steady_clock::duration d) {
  return std::chrono::steady_clock::now() + d;
}
// No deadline: for calls documented as unbounded (idle connections are closed by keepalive).
inline constexpr Deadline kNoDeadline = Deadline::max();

}  // namespace cb::net
