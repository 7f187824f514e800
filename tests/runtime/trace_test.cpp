// TraceRecorder: exact busy fractions (overlap, clipping, both modes), the Chrome
// trace-event file, concurrent recording, write errors.
#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <fstream>
#include <random>
#include <string>
#include <thread>
#include <vector>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "runtime/trace.hpp"

namespace vc {
namespace {

using std::chrono::milliseconds;
using time_point = TraceRecorder::time_point;

const time_point t0 = TraceRecorder::clock::now();

time_point at(int ms) { return t0 + milliseconds(ms); }

nlohmann::json read_json(const std::string& path) {
  std::ifstream in(path);
  return nlohmann::json::parse(in);
}

std::string temp_path(const std::string& name) {
  return ::testing::TempDir() + "/vc_trace_test_" + name + ".json";
}

TEST(trace, the_same_track_name_always_gets_the_same_id) {
  TraceRecorder r(false);
  const int drafter = r.track("drafter");
  const int mover = r.track("mover");
  EXPECT_NE(drafter, mover);
  EXPECT_EQ(r.track("drafter"), drafter);
  EXPECT_EQ(r.track("mover"), mover);
}

TEST(trace, busy_fraction_counts_overlaps_once_and_clips_to_the_window) {
  for (bool record : {false, true}) {
    TraceRecorder r(record);
    const int drafter = r.track("drafter");
    const int mover = r.track("mover");
    r.track("verifier");
    const uint64_t req = 7;
    // drafter: [0,10) and [5,15) overlap -> 15 ms; [20,30) -> 10 ms; an empty slice.
    r.slice(drafter, "draft step", {&req, 1}, at(20), at(30));
    r.slice(drafter, "draft step", {&req, 1}, at(5), at(15));
    r.slice(drafter, "draft step", {&req, 1}, at(0), at(10));
    r.slice(drafter, "draft step", {&req, 1}, at(40), at(40));
    // mover: [-10,10) and [90,120) clipped to [0,100) -> 20 ms; one slice entirely outside.
    r.slice(mover, "layer 0 transfer", {&req, 1}, at(-10), at(10), {{"bytes", 4096}});
    r.slice(mover, "layer 1 transfer", {&req, 1}, at(90), at(120));
    r.slice(mover, "layer 2 transfer", {&req, 1}, at(150), at(160));

    const auto f = r.busy_fraction(at(0), at(100));
    ASSERT_EQ(f.size(), 3u);
    EXPECT_DOUBLE_EQ(f.at("drafter"), 0.25) << "record_slices=" << record;
    EXPECT_DOUBLE_EQ(f.at("mover"), 0.2) << "record_slices=" << record;
    EXPECT_DOUBLE_EQ(f.at("verifier"), 0.0) << "record_slices=" << record;

    const auto g = r.busy_fraction(at(5), at(25));  // drafter [5,15) + [20,25)
    EXPECT_DOUBLE_EQ(g.at("drafter"), 0.75);
    EXPECT_DOUBLE_EQ(g.at("mover"), 0.25);  // [5,10)
    EXPECT_DOUBLE_EQ(r.busy_fraction(at(50), at(50)).at("drafter"), 0.0);
    EXPECT_EQ(r.slice_count(), 7u);
  }
}

TEST(trace, busy_fraction_stays_exact_over_many_shuffled_overlapping_slices) {
  // 2000 busy millisecond slots with a gap after each, every slot recorded twice
  // (once whole, once as two overlapping halves), in random order: enough
  // slices to go through several compactions.
  std::vector<std::pair<int, int>> spans;
  for (int i = 0; i < 2000; ++i) {
    spans.emplace_back(2 * i, 2 * i + 1);
    spans.emplace_back(2 * i, 2 * i + 1);
  }
  std::mt19937 rng(3);
  std::shuffle(spans.begin(), spans.end(), rng);
  for (bool record : {false, true}) {
    TraceRecorder r(record);
    const int t = r.track("verifier");
    for (const auto& [b, e] : spans) {
      const auto begin = t0 + milliseconds(b);
      const auto end = t0 + milliseconds(e);
      r.slice(t, "verify pass", {}, begin, end - std::chrono::microseconds(300));
      r.slice(t, "verify pass", {}, begin + std::chrono::microseconds(200), end);
    }
    EXPECT_EQ(r.slice_count(), 2 * spans.size());
    EXPECT_DOUBLE_EQ(r.busy_fraction(at(0), at(4000)).at("verifier"), 0.5);
    // Window [1000.5 ms, 1999.5 ms): slots 500..999, the first one half clipped.
    const auto from = at(1000) + std::chrono::microseconds(500);
    const auto to = at(2000) - std::chrono::microseconds(500);
    EXPECT_DOUBLE_EQ(r.busy_fraction(from, to).at("verifier"), 499.5 / 999.0);
  }
}

TEST(trace, the_written_file_is_chrome_trace_json_with_track_names_and_slices) {
  TraceRecorder r(true);
  const int drafter = r.track("drafter");
  const int verifier = r.track("verifier");
  const uint64_t one = 3;
  const std::vector<uint64_t> batch{4, 5, 6};
  const auto start = TraceRecorder::clock::now();
  r.slice(drafter, "draft step", {&one, 1}, start, start + milliseconds(2), {{"rows", 1}});
  r.slice(verifier, "verify pass", batch, start + milliseconds(3), start + milliseconds(8),
          {{"rows", 12}, {"bytes", 1.5e6}});
  { auto s = r.scope(drafter, "draft step", 9); }

  const std::string path = temp_path("file");
  r.write_chrome_trace(path);
  const auto doc = read_json(path);
  std::remove(path.c_str());

  EXPECT_EQ(doc.at("displayTimeUnit"), "ms");
  const auto& events = doc.at("traceEvents");
  ASSERT_TRUE(events.is_array());
  std::map<int, std::string> names;
  std::vector<nlohmann::json> xs;
  for (const auto& e : events) {
    if (e.at("ph") == "M") {
      EXPECT_EQ(e.at("name"), "thread_name");
      EXPECT_EQ(e.at("pid"), 1);
      names[e.at("tid").get<int>()] = e.at("args").at("name").get<std::string>();
    } else {
      EXPECT_EQ(e.at("ph"), "X");
      xs.push_back(e);
    }
  }
  EXPECT_EQ(names, (std::map<int, std::string>{{drafter, "drafter"}, {verifier, "verifier"}}));
  ASSERT_EQ(xs.size(), 3u);
  ASSERT_EQ(r.slice_count(), 3u);
  for (const auto& e : xs) {
    EXPECT_EQ(e.at("cat"), "vericache");
    EXPECT_EQ(e.at("pid"), 1);
    EXPECT_TRUE(e.at("ts").is_number());
    EXPECT_GE(e.at("ts").get<double>(), 0.0) << "ts counts from the recorder's creation";
    EXPECT_GE(e.at("dur").get<double>(), 0.0);
    EXPECT_TRUE(e.at("args").contains("request"));
  }
  EXPECT_EQ(xs[0].at("name"), "draft step");
  EXPECT_EQ(xs[0].at("tid"), drafter);
  EXPECT_EQ(xs[0].at("args").at("request"), 3);
  EXPECT_EQ(xs[0].at("args").at("rows"), 1.0);
  EXPECT_DOUBLE_EQ(xs[0].at("dur").get<double>(), 2000.0);

  EXPECT_EQ(xs[1].at("name"), "verify pass");
  EXPECT_EQ(xs[1].at("tid"), verifier);
  EXPECT_EQ(xs[1].at("args").at("request"), nlohmann::json({4, 5, 6}));
  EXPECT_EQ(xs[1].at("args").at("bytes"), 1.5e6);
  EXPECT_DOUBLE_EQ(xs[1].at("dur").get<double>(), 5000.0);
  EXPECT_NEAR(xs[1].at("ts").get<double>() - xs[0].at("ts").get<double>(), 3000.0, 1e-3);

  EXPECT_EQ(xs[2].at("tid"), drafter);
  EXPECT_EQ(xs[2].at("args").at("request"), 9);
}

TEST(trace, a_moved_scope_records_its_slice_once) {
  TraceRecorder r(true);
  const int mover = r.track("mover");
  {
    auto a = r.scope(mover, "layer 3 transfer", 1);
    TraceRecorder::Scope b(std::move(a));
  }
  EXPECT_EQ(r.slice_count(), 1u);
}

TEST(trace, four_threads_recording_at_once_lose_no_slice) {
  constexpr int threads = 4;
  constexpr int per_thread = 5000;
  for (bool record : {false, true}) {
    TraceRecorder r(record);
    const int shared = r.track("scheduler");
    std::vector<std::thread> pool;
    for (int w = 0; w < threads; ++w) {
      pool.emplace_back([&r, shared, w] {
        const int own = r.track("worker " + std::to_string(w));
        for (int i = 0; i < per_thread; ++i) {
          const uint64_t req = uint64_t(w * per_thread + i);
          const auto b = t0 + milliseconds(i);
          r.slice(own, "step", {&req, 1}, b, b + milliseconds(1), {{"i", double(i)}});
          { auto s = r.scope(shared, "tick", req); }
        }
      });
    }
    for (auto& t : pool) t.join();
    EXPECT_EQ(r.slice_count(), size_t(2 * threads * per_thread));
    const auto f = r.busy_fraction(at(0), at(per_thread));
    ASSERT_EQ(f.size(), size_t(threads + 1));
    for (int w = 0; w < threads; ++w) EXPECT_DOUBLE_EQ(f.at("worker " + std::to_string(w)), 1.0);
    if (!record) continue;

    const std::string path = temp_path("threads");
    r.write_chrome_trace(path);
    const auto doc = read_json(path);
    std::remove(path.c_str());
    std::vector<int> seen(threads * per_thread, 0);
    size_t x = 0, m = 0;
    for (const auto& e : doc.at("traceEvents")) {
      if (e.at("ph") == "M") {
        ++m;
        continue;
      }
      ++x;
      if (e.at("tid") == shared) ++seen[e.at("args").at("request").get<size_t>()];
    }
    EXPECT_EQ(m, size_t(threads + 1));
    EXPECT_EQ(x, size_t(2 * threads * per_thread));
    EXPECT_EQ(std::count(seen.begin(), seen.end(), 1), threads * per_thread);
  }
}

TEST(trace, an_unwritable_path_throws_an_error_naming_it) {
  TraceRecorder r(true);
  r.slice(r.track("drafter"), "draft step", {}, at(0), at(1));
  const std::string path = "/nonexistent-vc-dir/sub/trace.json";
  try {
    r.write_chrome_trace(path);
    FAIL() << "expected vc::Error";
  } catch (const Error& e) {
    EXPECT_NE(std::string(e.what()).find(path), std::string::npos) << e.what();
  }
}

TEST(trace, writing_a_trace_without_recorded_slices_is_an_error) {
  TraceRecorder r(false);
  r.slice(r.track("drafter"), "draft step", {}, at(0), at(1));
  EXPECT_THROW(r.write_chrome_trace(temp_path("off")), Error);
}

}  // namespace
}  // namespace vc
