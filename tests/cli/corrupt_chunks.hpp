// The remote-cache CLI tests' store fault: one payload byte of every chunk this
// project holds in the store flipped (each value then fails its checksum).
#pragma once
#include <gtest/gtest.h>

#include <string>

#include "kvtiers/remote/redis_client.hpp"

namespace vc::test {

inline void corrupt_every_chunk(const std::string& url) {
  RedisClient c(parse_redis_url(url));
  const auto scan = c.command({"SCAN", "0", "MATCH", "vc:kv:*", "COUNT", "10000"});
  for (const auto& k : scan.elements[1].elements) {
    std::string v = c.command({"GET", k.str}).str;
    v[v.size() - 5] ^= 0x01;
    ASSERT_EQ(c.command({"SET", k.str, v}).str, "OK");
  }
}

}  // namespace vc::test
