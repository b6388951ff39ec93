// NameTable, the graph's open-addressing name index: random inserts, erases (by name and by
// entry, with some names shared by two objects) and lookups must agree with std::unordered_map,
// including across growth and the backward-shift deletion.
#include <catch2/catch.hpp>

#include <memory>
#include <random>
#include <string>
#include <unordered_map>
#include <vector>

#include "fusectl/support/name_table.h"

namespace {
struct Named {
  std::string n;
  const std::string& name() const { return n; }
};
}  // namespace

TEST_CASE("NameTable agrees with unordered_map under random edits", "[graph][name_table]") {
  std::mt19937 rng(12345);
  std::vector<std::unique_ptr<Named>> pool;
  for (int i = 0; i < 3000; ++i) pool.push_back(std::make_unique<Named>(Named{"v" + std::to_string(i % 2600)}));
  fusectl::NameTable<Named> table;
  std::unordered_map<std::string, Named*> reference;
  for (int step = 0; step < 60000; ++step) {
    Named* p = pool[rng() % pool.size()].get();
    switch (rng() % 4) {
      case 0: {
        bool inserted = table.insert(p);
        REQUIRE(inserted == reference.emplace(p->n, p).second);
        break;
      }
      case 1:
        REQUIRE(table.erase(p->n) == (reference.erase(p->n) == 1));
        break;
      case 2: {  // by entry: only p's own, not another object's of the same name
        auto it = reference.find(p->n);
        const bool own = it != reference.end() && it->second == p;
        if (own) reference.erase(it);
        REQUIRE(table.eraseEntryOf(p) == own);
        break;
      }
      default: {
        auto it = reference.find(p->n);
        REQUIRE(table.find(p->n) == (it == reference.end() ? nullptr : it->second));
      }
    }
    REQUIRE(table.size() == reference.size());
  }
  for (const auto& p : pool) {
    auto it = reference.find(p->n);
    REQUIRE(table.find(p->n) == (it == reference.end() ? nullptr : it->second));
  }
  CHECK(table.find("absent") == nullptr);
  CHECK_FALSE(table.erase("absent"));
}

TEST_CASE("NameTable reserve keeps entries and an empty table finds nothing", "[graph][name_table]") {
  fusectl::NameTable<Named> table;
  CHECK(table.find("x") == nullptr);
  CHECK_FALSE(table.erase("x"));
  Named a{"a"}, b{"b"};
  REQUIRE(table.insert(&a));
  table.reserve(100000);
  REQUIRE(table.insert(&b));
  CHECK(table.find("a") == &a);
  CHECK(table.find("b") == &b);
  CHECK_FALSE(table.insert(&a));
  CHECK(table.size() == 2);
}
