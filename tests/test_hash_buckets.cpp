// HashBuckets (fusectl/passes/hash_buckets.h), the flat multimap behind dedup-initializers and
// eliminate-common-subexpressions: items sharing a hash must all stay reachable, through
// growth and wrap-around at the end of the array, and a miss must say so.
#include <catch2/catch.hpp>

#include <cstdint>
#include <vector>

#include "fusectl/passes/hash_buckets.h"

using fusectl::passes::HashBuckets;

namespace {
struct Item {
  int id;
};
}  // namespace

TEST_CASE("HashBuckets finds every item of a shared hash, and only those", "[hash_buckets]") {
  std::vector<Item> items(40);
  for (int i = 0; i < 40; ++i) items[static_cast<size_t>(i)].id = i;
  HashBuckets<Item> buckets(4);  // far too small: forces growth
  // Ten items per hash value, hash values chosen to collide in the low bits too.
  for (Item& item : items) buckets.insert(static_cast<uint64_t>(item.id % 4) << 40, &item);
  for (const Item& wanted : items) {
    const uint64_t hash = static_cast<uint64_t>(wanted.id % 4) << 40;
    int calls = 0;
    Item* found = buckets.find(hash, [&](const Item* candidate) {
      ++calls;
      CHECK(candidate->id % 4 == wanted.id % 4);  // only same-hash items are offered
      return candidate->id == wanted.id;
    });
    REQUIRE(found == &wanted);
    CHECK(calls <= 10);
  }
  CHECK(buckets.find(uint64_t{7} << 40, [](const Item*) { return true; }) == nullptr);
  CHECK(buckets.find(0, [](const Item*) { return false; }) == nullptr);
}

TEST_CASE("HashBuckets keeps items reachable when probe runs wrap around", "[hash_buckets]") {
  // 8 items in a table of 16 slots, all with hashes whose probe starts at the last slot (as
  // hash_buckets.h computes the start today), so the run wraps to the front of the array.
  std::vector<Item> items(8);
  HashBuckets<Item> buckets(8);
  std::vector<uint64_t> hashes;
  for (uint64_t h = 1; hashes.size() < items.size(); ++h)
    if (((h * 0x9e3779b97f4a7c15ULL) >> 20 & 15) == 15) hashes.push_back(h);
  for (size_t i = 0; i < items.size(); ++i) {
    items[i].id = static_cast<int>(i);
    buckets.insert(hashes[i], &items[i]);
  }
  for (size_t i = 0; i < items.size(); ++i) {
    Item* found = buckets.find(hashes[i], [&](const Item* c) { return c == &items[i]; });
    CHECK(found == &items[i]);
  }
  CHECK(buckets.find(hashes[0] + 1, [](const Item*) { return true; }) == nullptr);
}
