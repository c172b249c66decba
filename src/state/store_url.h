#pragma once
// open_store_url(): a Store chosen by a URL, for a flag or a config value (README.md
// §Choosing a store).
//
//   file:///abs/path                      FsStore rooted at /abs/path
//   s3://<bucket>[/<prefix>]?endpoint=<http(s)://host[:port]>&access_key=<id>
//        &secret_file=</abs/path>[&region=<region>][&ca_file=</abs/path>][&verify=0]
//                                         S3Store (s3_store.h); region defaults to us-east-1
//
// Query values are percent-decoded. The secret is never part of the URL: secret_file names a
// file holding it (read_secret_file()), so the URL may appear in argv, logs and configs.
// An unknown parameter is an error, not ignored, so a typo cannot silently drop an option.
//
// Thread-safety: free functions.

#include "base/result.h"
#include "state/store.h"

#include <memory>
#include <string_view>

namespace cb::state {

// Errors: kInvalidArgument naming the part of |url| that is wrong (scheme, path, parameter);
//   the errors of FsStore::open, read_secret_file and S3Store::open.
Result<std::unique_ptr<Store>> open_store_url(std::string_view url);

}  // namespace cb::state
