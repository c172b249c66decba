#pragma once
// `cocoonbox mcp [--no-wake] [--box NAME]` (seed §13.2, §19.2; README.md): a stdio MCP server
// for local coding agents that merges the api's control tools and a box's tools, holding the
// user's token in memory only and one HTTP/2 connection to the api for both endpoints.
//
// tools/list never wakes a box and never waits for the api: control tools come from the
// control MCP once reached, else from the compiled-in contract; box tools from the box's live
// list when it is RUNNING, else from the cache the bridge writes whenever it saw one
// ($XDG_CACHE_HOME/cocoonbox/tools.json), else from the compiled-in contract. When a live list
// differs from what clients were given, they get notifications/tools/list_changed.
//
// Box tools take an optional `box` (name or id; default --box, else "main"), resolved per
// call through the control MCP (another user's box is not found). A box that is not RUNNING
// is woken with box_ensure first, its progress passed on as MCP progress; with --no-wake the
// call fails telling the model to call box_ensure. An api that cannot be reached fails the
// call with a clear error; the bridge keeps serving and tries again with backoff (1 s up to
// 60 s).

#include <span>

namespace cb::bridge {

// args[0] is "mcp". Returns the exit status.
int run(std::span<char* const> args);

}  // namespace cb::bridge
