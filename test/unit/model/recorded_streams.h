#pragma once
// Streams recorded in the shape each upstream sends them (field order, nulls, pings and all),
// shared by the unit tests. Each holds text, two tool calls and usage.

#include <string_view>

namespace cb::model::test {

// OpenAI chat completions, stream_options.include_usage: text, then two parallel tool calls
// whose arguments arrive in fragments, finish_reason, the usage chunk with empty choices, and
// [DONE]. Blank-line separated "data:" events, as api.openai.com writes them.
inline constexpr std::string_view kOpenAiStream =
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"system_fingerprint\":\"fp_1\",\"choices\":[{\"index\":0,"
    "\"delta\":{\"role\":\"assistant\",\"content\":\"\",\"refusal\":null},\"logprobs\":null,"
    "\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"Let me "
    "\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"content\":\"check "
    "é.\"},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
    "\"index\":0,\"id\":\"call_a1\",\"type\":\"function\",\"function\":{\"name\":\"get_weather\","
    "\"arguments\":\"\"}}]},\"logprobs\":null,\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
    "\"index\":0,\"function\":{\"arguments\":\"{\\\"loc\"}}]},\"logprobs\":null,"
    "\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
    "\"index\":0,\"function\":{\"arguments\":\"ation\\\": \\\"Paris\\\"}\"}}]},\"logprobs\":null,"
    "\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
    "\"index\":1,\"id\":\"call_b2\",\"type\":\"function\",\"function\":{\"name\":\"get_time\","
    "\"arguments\":\"{\\\"tz\\\":\"}}]},\"logprobs\":null,\"finish_reason\":null}],"
    "\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{\"tool_calls\":[{"
    "\"index\":1,\"function\":{\"arguments\":\" \\\"CET\\\"}\"}}]},\"logprobs\":null,"
    "\"finish_reason\":null}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[{\"index\":0,\"delta\":{},\"logprobs\":null,"
    "\"finish_reason\":\"tool_calls\"}],\"usage\":null}\n\n"
    "data: {\"id\":\"chatcmpl-9x1\",\"object\":\"chat.completion.chunk\",\"created\":1718000000,"
    "\"model\":\"gpt-4o-2024-08-06\",\"choices\":[],\"usage\":{\"prompt_tokens\":82,"
    "\"completion_tokens\":17,\"total_tokens\":99,\"prompt_tokens_details\":{\"cached_tokens\":64,"
    "\"audio_tokens\":0},\"completion_tokens_details\":{\"reasoning_tokens\":0}}}\n\n"
    "data: [DONE]\n\n";

// Anthropic messages: event names and data, a ping, a text block, a tool_use block whose
// input arrives as input_json_delta fragments, message_delta with the stop reason and the
// output tokens, message_stop. CRLF line ends on purpose (the parser must not care).
inline constexpr std::string_view kAnthropicStream =
    "event: message_start\r\n"
    "data: {\"type\":\"message_start\",\"message\":{\"id\":\"msg_01XFD\",\"type\":\"message\","
    "\"role\":\"assistant\",\"model\":\"claude-sonnet-4-5\",\"content\":[],\"stop_reason\":null,"
    "\"stop_sequence\":null,\"usage\":{\"input_tokens\":472,\"cache_creation_input_tokens\":20,"
    "\"cache_read_input_tokens\":100,\"output_tokens\":2}}}\r\n\r\n"
    "event: content_block_start\r\n"
    "data: {\"type\":\"content_block_start\",\"index\":0,\"content_block\":{\"type\":\"text\","
    "\"text\":\"\"}}\r\n\r\n"
    "event: ping\r\n"
    "data: {\"type\": \"ping\"}\r\n\r\n"
    "event: content_block_delta\r\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"Okay, \"}}\r\n\r\n"
    "event: content_block_delta\r\n"
    "data: {\"type\":\"content_block_delta\",\"index\":0,\"delta\":{\"type\":\"text_delta\","
    "\"text\":\"checking ☀.\"}}\r\n\r\n"
    "event: content_block_stop\r\n"
    "data: {\"type\":\"content_block_stop\",\"index\":0}\r\n\r\n"
    "event: content_block_start\r\n"
    "data: {\"type\":\"content_block_start\",\"index\":1,\"content_block\":{\"type\":\"tool_use\","
    "\"id\":\"toolu_01T1\",\"name\":\"get_weather\",\"input\":{}}}\r\n\r\n"
    "event: content_block_delta\r\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"\"}}\r\n\r\n"
    "event: content_block_delta\r\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"{\\\"location\\\": \"}}\r\n\r\n"
    "event: content_block_delta\r\n"
    "data: {\"type\":\"content_block_delta\",\"index\":1,\"delta\":{\"type\":\"input_json_delta\","
    "\"partial_json\":\"\\\"Paris\\\"}\"}}\r\n\r\n"
    "event: content_block_stop\r\n"
    "data: {\"type\":\"content_block_stop\",\"index\":1}\r\n\r\n"
    "event: message_delta\r\n"
    "data: {\"type\":\"message_delta\",\"delta\":{\"stop_reason\":\"tool_use\","
    "\"stop_sequence\":null},\"usage\":{\"output_tokens\":89}}\r\n\r\n"
    "event: message_stop\r\n"
    "data: {\"type\":\"message_stop\"}\r\n\r\n";

}  // namespace cb::model::test
