#pragma once
// The few S3 XML documents the S3 store reads and writes (README.md §S3 store): the
// ListObjectsV2 result, the error document, the DeleteObjects request and its result.
// Sans-I/O: the bytes come from a server, so every parser here is written for untrusted
// input (no recursion past kMaxXmlDepth, no entity expansion but the five predefined ones and
// character references, sizes checked) and fuzzed (test/fuzz/s3_xml_fuzz.cc).
//
// The XML subset read (XML 1.0 as S3 servers send it):
//   document := misc* element misc*
//   misc     := "<?" ... "?>" | "<!--" ... "-->" | whitespace
//   element  := "<" name attribute* ">" content "</" name ">" | "<" name attribute* "/>"
//   content  := (text | element | "<![CDATA[" ... "]]>" | "<!--" ... "-->" | "<?" ... "?>")*
//   text     := characters with &lt; &gt; &amp; &quot; &apos; &#N; &#xN; references
// A DOCTYPE is refused (S3 never sends one; it is the door to entity expansion). Element names
// are compared by their local part ("s3:Key" matches "Key"); attributes (xmlns) are skipped.
//
// Thread-safety: free functions.

#include "base/result.h"
#include "state/store.h"

#include <span>
#include <string>
#include <string_view>
#include <vector>

namespace cb::state::s3xml {

inline constexpr size_t kMaxXmlDepth = 16;

// One element: its local name, its text (the concatenated character data directly inside it,
// untrimmed) and its child elements in document order.
struct Element {
  std::string name;
  std::string text;
  std::vector<Element> children;

  // The first child named |name|, or nullptr.
  const Element* child(std::string_view name) const;
};

// Parses a whole document into its root element.
// Errors: kInvalidArgument naming what is malformed (a DOCTYPE, an unknown entity, tags that
//   do not match, nesting deeper than kMaxXmlDepth, text outside the root, a bad character
//   reference).
Result<Element> parse_document(std::string_view xml);

// The part of a ListObjectsV2 result (ListBucketResult) the store needs.
struct ListResult {
  std::vector<ObjectInfo> objects;  // in the order the server sent them
  bool truncated = false;
};
// Errors: kInvalidArgument if the document is malformed, the root is not ListBucketResult,
//   IsTruncated is missing or not "true"/"false", or a Contents lacks a Key or a Size that is
//   a decimal uint64.
Result<ListResult> parse_list_result(std::string_view xml);

// An S3 error document (<Error><Code>..</Code><Message>..</Message>...</Error>).
struct ErrorInfo {
  std::string code;     // "SignatureDoesNotMatch", "NoSuchKey", ...
  std::string message;  // may be empty
};
// Errors: kInvalidArgument if the document is malformed or its root is not Error.
Result<ErrorInfo> parse_error(std::string_view xml);

// The per-key failures of a DeleteObjects result (DeleteResult/Error); deleted keys are not
// reported (quiet mode).
struct DeleteError {
  std::string key;
  std::string code;
  std::string message;
};
// Errors: kInvalidArgument if the document is malformed or its root is not DeleteResult.
Result<std::vector<DeleteError>> parse_delete_result(std::string_view xml);

// The DeleteObjects request body for |keys|, quiet (only failures come back):
//   <?xml version="1.0" encoding="UTF-8"?><Delete><Quiet>true</Quiet>
//   <Object><Key>escaped key</Key></Object>...</Delete>
std::string delete_request_body(std::span<const std::string> keys);

// |text| with & < > " ' escaped as entities.
std::string escape(std::string_view text);

}  // namespace cb::state::s3xml
