#include "http/server.h"
namespace cb::http {
asio::awaitable<void> Server::serve_h1(std::unique_ptr<net::Stream> stream, std::string) {
  stream->close();
  co_return;
}
}  // namespace cb::http
