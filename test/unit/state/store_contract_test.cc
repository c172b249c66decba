// The shared Store contract (store_contract.h) on the filesystem backend; the S3 backend runs
// the same check against radosgw (test/state/s3_radosgw_test.cc).

#include "unit/state/store_contract.h"

#include "state/fs_store.h"
#include "support/temp_dir.h"

#include <catch2/catch.hpp>

namespace cb::state {
namespace {

TEST_CASE("FsStore: passes the Store contract", "[state][unit]") {
  test::TempDir dir;
  FsStore::Options options;
  options.sync = false;  // the contract is about behaviour; durability is store_test.cc's
  auto store = FsStore::open(dir.path() / "store", options);
  REQUIRE(store.ok());
  test_util::check_store_contract(**store);
}

}  // namespace
}  // namespace cb::state
