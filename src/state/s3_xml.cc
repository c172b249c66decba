#include "state/s3_xml.h"

#include <cstdint>
#include <optional>

namespace cb::state::s3xml {

namespace {

Status bad(std::string_view what) { return invalid_argument("s3 xml: " + std::string(what)); }

bool is_space(char c) { return c == ' ' || c == '\t' || c == '\r' || c == '\n'; }

bool is_name_char(char c) {
  return !is_space(c) && c != '>' && c != '/' && c != '=' && c != '<' && c != '"' && c != '\'' &&
         c != '&';
}

// The local part of a qualified name: "s3:Key" -> "Key".
std::string_view local_name(std::string_view name) {
  size_t colon = name.rfind(':');
  return colon == std::string_view::npos ? name : name.substr(colon + 1);
}

void append_utf8(std::string& out, uint32_t cp) {
  if (cp < 0x80) {
    out += char(cp);
  } else if (cp < 0x800) {
    out += char(0xc0 | (cp >> 6));
    out += char(0x80 | (cp & 0x3f));
  } else if (cp < 0x10000) {
    out += char(0xe0 | (cp >> 12));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  } else {
    out += char(0xf0 | (cp >> 18));
    out += char(0x80 | ((cp >> 12) & 0x3f));
    out += char(0x80 | ((cp >> 6) & 0x3f));
    out += char(0x80 | (cp & 0x3f));
  }
}

// Appends |raw| (character data between markup) to |out| with references resolved.
Status append_text(std::string& out, std::string_view raw) {
  size_t i = 0;
  while (i < raw.size()) {
    size_t amp = raw.find('&', i);
    if (amp == std::string_view::npos) {
      out.append(raw.substr(i));
      break;
    }
    out.append(raw.substr(i, amp - i));
    size_t semi = raw.find(';', amp);
    if (semi == std::string_view::npos || semi - amp > 12) return bad("unterminated reference");
    std::string_view ref = raw.substr(amp + 1, semi - amp - 1);
    if (ref == "lt") {
      out += '<';
    } else if (ref == "gt") {
      out += '>';
    } else if (ref == "amp") {
      out += '&';
    } else if (ref == "quot") {
      out += '"';
    } else if (ref == "apos") {
      out += '\'';
    } else if (ref.size() >= 2 && ref[0] == '#') {
      bool hex = ref[1] == 'x';
      std::string_view digits = ref.substr(hex ? 2 : 1);
      if (digits.empty()) return bad("empty character reference");
      uint32_t cp = 0;
      for (char c : digits) {
        uint32_t d;
        if (c >= '0' && c <= '9') {
          d = uint32_t(c - '0');
        } else if (hex && c >= 'a' && c <= 'f') {
          d = uint32_t(c - 'a' + 10);
        } else if (hex && c >= 'A' && c <= 'F') {
          d = uint32_t(c - 'A' + 10);
        } else {
          return bad("bad character reference");
        }
        cp = cp * (hex ? 16 : 10) + d;
        if (cp > 0x10ffff) return bad("character reference out of range");
      }
      if (cp == 0 || (cp >= 0xd800 && cp <= 0xdfff)) return bad("character reference not allowed");
      append_utf8(out, cp);
    } else {
      return bad("unknown entity &" + std::string(ref) + ";");
    }
    i = semi + 1;
  }
  return ok_status();
}

// Skips "<?...?>" or "<!--...-->" starting at |pos|; returns the position after it.
Result<size_t> skip_markup(std::string_view xml, size_t pos) {
  if (xml.substr(pos, 2) == "<?") {
    size_t end = xml.find("?>", pos + 2);
    if (end == std::string_view::npos) return bad("unterminated processing instruction");
    return end + 2;
  }
  if (xml.substr(pos, 4) == "<!--") {
    size_t end = xml.find("-->", pos + 4);
    if (end == std::string_view::npos) return bad("unterminated comment");
    return end + 3;
  }
  return bad("unexpected markup");
}

// A parsed start or end tag.
struct Tag {
  std::string_view name;
  bool end = false;           // "</name>"
  bool self_closing = false;  // "<name/>"
  size_t next = 0;            // position after '>'
};

// Parses the tag starting at xml[pos] == '<' (not a comment, PI, CDATA or DOCTYPE).
Result<Tag> parse_tag(std::string_view xml, size_t pos) {
  Tag tag;
  size_t i = pos + 1;
  if (i < xml.size() && xml[i] == '/') {
    tag.end = true;
    ++i;
  }
  size_t start = i;
  while (i < xml.size() && is_name_char(xml[i])) ++i;
  if (i == start) return bad("a tag without a name");
  tag.name = xml.substr(start, i - start);
  // Attributes: name = "value" | 'value', skipped.
  while (true) {
    while (i < xml.size() && is_space(xml[i])) ++i;
    if (i >= xml.size()) return bad("unterminated tag");
    if (xml[i] == '>') {
      tag.next = i + 1;
      return tag;
    }
    if (xml[i] == '/' && !tag.end) {
      if (i + 1 >= xml.size() || xml[i + 1] != '>') return bad("stray '/' in a tag");
      tag.self_closing = true;
      tag.next = i + 2;
      return tag;
    }
    if (tag.end) return bad("attributes in an end tag");
    size_t name_start = i;
    while (i < xml.size() && is_name_char(xml[i])) ++i;
    if (i == name_start) return bad("malformed attribute");
    while (i < xml.size() && is_space(xml[i])) ++i;
    if (i >= xml.size() || xml[i] != '=') return bad("attribute without a value");
    ++i;
    while (i < xml.size() && is_space(xml[i])) ++i;
    if (i >= xml.size() || (xml[i] != '"' && xml[i] != '\'')) return bad("unquoted attribute");
    size_t close = xml.find(xml[i], i + 1);
    if (close == std::string_view::npos) return bad("unterminated attribute value");
    if (xml.substr(i + 1, close - i - 1).find('<') != std::string_view::npos) {
      return bad("'<' in an attribute value");
    }
    i = close + 1;
  }
}

bool only_space(std::string_view s) {
  for (char c : s) {
    if (!is_space(c)) return false;
  }
  return true;
}

Result<uint64_t> parse_u64(std::string_view s, std::string_view what) {
  if (s.empty() || s.size() > 20) return bad(std::string(what) + " is not a number");
  uint64_t v = 0;
  for (char c : s) {
    if (c < '0' || c > '9') return bad(std::string(what) + " is not a number");
    uint64_t d = uint64_t(c - '0');
    if (v > (UINT64_MAX - d) / 10) return bad(std::string(what) + " overflows");
    v = v * 10 + d;
  }
  return v;
}

std::string_view trimmed(std::string_view s) {
  while (!s.empty() && is_space(s.front())) s.remove_prefix(1);
  while (!s.empty() && is_space(s.back())) s.remove_suffix(1);
  return s;
}

Result<Element> parse_root(std::string_view xml, std::string_view want) {
  ASSIGN_OR_RETURN(Element root, parse_document(xml));
  if (root.name != want) return bad("root element " + root.name + ", want " + std::string(want));
  return root;
}

}  // namespace

const Element* Element::child(std::string_view want) const {
  for (const auto& c : children) {
    if (c.name == want) return &c;
  }
  return nullptr;
}

Result<Element> parse_document(std::string_view xml) {
  // A UTF-8 byte order mark may precede the declaration.
  if (xml.substr(0, 3) == "\xEF\xBB\xBF") xml.remove_prefix(3);
  // The open elements, outermost first; |stack| never holds more than kMaxXmlDepth.
  std::vector<Element> stack;
  std::vector<std::string> raw_names;  // qualified names, to match end tags exactly
  std::optional<Element> root;
  size_t pos = 0;
  while (pos < xml.size()) {
    size_t lt = xml.find('<', pos);
    std::string_view text = xml.substr(pos, lt == std::string_view::npos ? lt : lt - pos);
    if (!text.empty()) {
      if (stack.empty()) {
        if (!only_space(text)) return bad("text outside the root element");
      } else {
        RETURN_IF_ERROR(append_text(stack.back().text, text));
      }
    }
    if (lt == std::string_view::npos) break;
    pos = lt;
    std::string_view rest = xml.substr(pos);
    if (rest.substr(0, 2) == "<?" || rest.substr(0, 4) == "<!--") {
      ASSIGN_OR_RETURN(pos, skip_markup(xml, pos));
      continue;
    }
    if (rest.substr(0, 9) == "<![CDATA[") {
      if (stack.empty()) return bad("CDATA outside the root element");
      size_t end = xml.find("]]>", pos + 9);
      if (end == std::string_view::npos) return bad("unterminated CDATA");
      stack.back().text.append(xml.substr(pos + 9, end - pos - 9));
      pos = end + 3;
      continue;
    }
    if (rest.substr(0, 2) == "<!") return bad("DOCTYPE and declarations are not accepted");
    ASSIGN_OR_RETURN(Tag tag, parse_tag(xml, pos));
    pos = tag.next;
    if (tag.end) {
      if (stack.empty() || raw_names.back() != tag.name) {
        return bad("end tag </" + std::string(tag.name) + "> does not match");
      }
      Element done = std::move(stack.back());
      stack.pop_back();
      raw_names.pop_back();
      if (stack.empty()) {
        root = std::move(done);
      } else {
        stack.back().children.push_back(std::move(done));
      }
      continue;
    }
    if (stack.empty() && root) return bad("a second root element");
    Element e;
    e.name = std::string(local_name(tag.name));
    if (tag.self_closing) {
      if (stack.empty()) {
        root = std::move(e);
      } else {
        stack.back().children.push_back(std::move(e));
      }
      continue;
    }
    if (stack.size() >= kMaxXmlDepth) return bad("elements nested too deeply");
    stack.push_back(std::move(e));
    raw_names.emplace_back(tag.name);
  }
  if (!stack.empty()) return bad("unterminated element <" + raw_names.back() + ">");
  if (!root) return bad("no root element");
  return std::move(*root);
}

Result<ListResult> parse_list_result(std::string_view xml) {
  ASSIGN_OR_RETURN(Element root, parse_root(xml, "ListBucketResult"));
  ListResult out;
  const Element* truncated = root.child("IsTruncated");
  if (truncated == nullptr) return bad("ListBucketResult without IsTruncated");
  std::string_view t = trimmed(truncated->text);
  if (t == "true") {
    out.truncated = true;
  } else if (t != "false") {
    return bad("IsTruncated is neither true nor false");
  }
  for (const auto& c : root.children) {
    if (c.name != "Contents") continue;
    const Element* key = c.child("Key");
    const Element* size = c.child("Size");
    if (key == nullptr || key->text.empty()) return bad("Contents without a Key");
    if (size == nullptr) return bad("Contents without a Size");
    ASSIGN_OR_RETURN(uint64_t n, parse_u64(trimmed(size->text), "Size"));
    out.objects.push_back(ObjectInfo{key->text, n});
  }
  return out;
}

Result<ErrorInfo> parse_error(std::string_view xml) {
  ASSIGN_OR_RETURN(Element root, parse_root(xml, "Error"));
  ErrorInfo out;
  if (const Element* code = root.child("Code")) out.code = std::string(trimmed(code->text));
  if (const Element* msg = root.child("Message")) out.message = std::string(trimmed(msg->text));
  return out;
}

Result<std::vector<DeleteError>> parse_delete_result(std::string_view xml) {
  ASSIGN_OR_RETURN(Element root, parse_root(xml, "DeleteResult"));
  std::vector<DeleteError> out;
  for (const auto& c : root.children) {
    if (c.name != "Error") continue;
    DeleteError e;
    if (const Element* key = c.child("Key")) e.key = key->text;
    if (const Element* code = c.child("Code")) e.code = std::string(trimmed(code->text));
    if (const Element* msg = c.child("Message")) e.message = std::string(trimmed(msg->text));
    out.push_back(std::move(e));
  }
  return out;
}

std::string escape(std::string_view text) {
  std::string out;
  out.reserve(text.size());
  for (char c : text) {
    switch (c) {
      case '&':
        out += "&amp;";
        break;
      case '<':
        out += "&lt;";
        break;
      case '>':
        out += "&gt;";
        break;
      case '"':
        out += "&quot;";
        break;
      case '\'':
        out += "&apos;";
        break;
      default:
        out += c;
    }
  }
  return out;
}

std::string delete_request_body(std::span<const std::string> keys) {
  std::string out = "<?xml version=\"1.0\" encoding=\"UTF-8\"?><Delete><Quiet>true</Quiet>";
  for (const auto& k : keys) out += "<Object><Key>" + escape(k) + "</Key></Object>";
  out += "</Delete>";
  return out;
}

}  // namespace cb::state::s3xml
