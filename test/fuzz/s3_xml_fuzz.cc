// libFuzzer target for the S3 XML parsers (src/state/s3_xml.h): the documents come from
// whatever server the S3 store's endpoint names.
//
// Beyond "no crash, no sanitizer report" it checks properties the contract promises:
// - every parser fails only with kInvalidArgument;
// - nesting never exceeds kMaxXmlDepth;
// - escape() round-trips: any text an element held parses back to the same bytes;
// - the keys of an accepted list result go through delete_request_body() and parse back
//   unchanged (what we write, we read).
//
// Build and run by hand:
//   clang++ -std=c++20 -fsanitize=fuzzer,address,undefined -DFMT_HEADER_ONLY -Isrc \
//     test/fuzz/s3_xml_fuzz.cc src/state/s3_xml.cc src/base/*.cc -o /tmp/s3_xml_fuzz
//   /tmp/s3_xml_fuzz -max_total_time=60 test/fuzz/corpus/s3_xml

#include "state/s3_xml.h"

#include <cstddef>
#include <cstdint>
#include <cstdlib>
#include <string>
#include <string_view>
#include <vector>

namespace {

using cb::Code;
namespace s3xml = cb::state::s3xml;

void require(bool condition) {
  if (!condition) std::abort();
}

template <typename R>
void require_invalid_argument_on_error(const R& r) {
  require(r.ok() || r.status().code() == Code::kInvalidArgument);
}

size_t depth(const s3xml::Element& e) {
  size_t d = 0;
  for (const auto& c : e.children) d = std::max(d, depth(c));
  return d + 1;
}

void check_text_round_trip(const s3xml::Element& e) {
  auto again = s3xml::parse_document("<x>" + s3xml::escape(e.text) + "</x>");
  require(again.ok() && again->text == e.text);
  for (const auto& c : e.children) check_text_round_trip(c);
}

}  // namespace

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string_view xml(reinterpret_cast<const char*>(data), size);

  auto doc = s3xml::parse_document(xml);
  require_invalid_argument_on_error(doc);
  if (doc.ok()) {
    require(depth(*doc) <= s3xml::kMaxXmlDepth);
    check_text_round_trip(*doc);
  }

  auto list = s3xml::parse_list_result(xml);
  require_invalid_argument_on_error(list);
  if (list.ok()) {
    require(doc.ok());
    std::vector<std::string> keys;
    for (const auto& o : list->objects) {
      require(!o.key.empty());
      keys.push_back(o.key);
    }
    auto body = s3xml::parse_document(s3xml::delete_request_body(keys));
    require(body.ok() && body->name == "Delete");
    require(body->children.size() == keys.size() + 1);
    for (size_t i = 0; i < keys.size(); ++i) {
      const s3xml::Element* key = body->children[i + 1].child("Key");
      require(key != nullptr && key->text == keys[i]);
    }
  }

  require_invalid_argument_on_error(s3xml::parse_error(xml));
  require_invalid_argument_on_error(s3xml::parse_delete_result(xml));
  return 0;
}
