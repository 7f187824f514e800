// TraceRecorder: per-track busy intervals, optional named slices, Chrome
// trace-event JSON output.
#include "runtime/trace.hpp"

#include <algorithm>
#include <fstream>

#include <nlohmann/json.hpp>

#include "kernels/error.hpp"

namespace vc {
namespace {

/// Sorts `v` by begin and merges overlapping or touching intervals in place;
/// drops empty ones.
template <typename Interval>
void merge_in_place(std::vector<Interval>& v) {
  std::erase_if(v, [](const Interval& i) { return !(i.begin < i.end); });
  std::sort(v.begin(), v.end(),
            [](const Interval& a, const Interval& b) { return a.begin < b.begin; });
  size_t out = 0;
  for (size_t i = 0; i < v.size(); ++i) {
    if (out > 0 && v[i].begin <= v[out - 1].end) {
      v[out - 1].end = std::max(v[out - 1].end, v[i].end);
    } else {
      v[out++] = v[i];
    }
  }
  v.resize(out);
}

double micros(TraceRecorder::clock::duration d) {
  return std::chrono::duration<double, std::micro>(d).count();
}

}  // namespace

TraceRecorder::TraceRecorder(bool record_slices)
    : record_slices_(record_slices), origin_(clock::now()) {}

int TraceRecorder::track(const std::string& name) {
  std::lock_guard lock(mutex_);
  if (auto it = track_ids_.find(name); it != track_ids_.end()) return it->second;
  const int id = int(tracks_.size());
  tracks_.push_back(Track{name, {}, 0});
  track_ids_.emplace(name, id);
  return id;
}

void TraceRecorder::slice(int track, std::string_view name,
                          std::span<const uint64_t> requests, time_point begin,
                          time_point end,
                          std::initializer_list<std::pair<std::string_view, double>> args) {
  if (end < begin) end = begin;
  // Build the named slice outside the lock: allocation is the slow part.
  Slice s;
  if (record_slices_) {
    s.track = track;
    s.name = std::string(name);
    s.requests.assign(requests.begin(), requests.end());
    s.begin = begin;
    s.end = end;
    s.args.reserve(args.size());
    for (const auto& [key, value] : args) s.args.emplace_back(std::string(key), value);
  }
  std::lock_guard lock(mutex_);
  if (track < 0 || size_t(track) >= tracks_.size()) {
    throw Error("TraceRecorder::slice: unknown track id " + std::to_string(track) +
                " (" + std::to_string(tracks_.size()) + " tracks)");
  }
  Track& t = tracks_[size_t(track)];
  if (begin < end) {
    t.intervals.push_back({begin, end});
    if (t.intervals.size() >= std::max<size_t>(64, 2 * t.compacted_size)) {
      merge_in_place(t.intervals);
      t.compacted_size = t.intervals.size();
    }
  }
  ++slice_count_;
  if (record_slices_) slices_.push_back(std::move(s));
}

TraceRecorder::Scope::Scope(TraceRecorder& recorder, int track, std::string_view name,
                            uint64_t request)
    : recorder_(&recorder),
      track_(track),
      name_(recorder.records_slices() ? std::string(name) : std::string()),
      request_(request),
      begin_(clock::now()) {}

TraceRecorder::Scope::Scope(Scope&& other) noexcept
    : recorder_(std::exchange(other.recorder_, nullptr)),
      track_(other.track_),
      name_(std::move(other.name_)),
      request_(other.request_),
      begin_(other.begin_) {}

TraceRecorder::Scope::~Scope() {
  if (recorder_ == nullptr) return;
  const time_point end = clock::now();
  try {
    recorder_->slice(track_, name_, std::span<const uint64_t>(&request_, 1), begin_, end);
  } catch (...) {
    // A destructor must not throw; an unknown track id loses only this slice.
  }
}

TraceRecorder::Scope TraceRecorder::scope(int track, std::string_view name,
                                          uint64_t request) {
  return Scope(*this, track, name, request);
}

std::map<std::string, double> TraceRecorder::busy_fraction(time_point from,
                                                           time_point to) const {
  std::map<std::string, double> out;
  std::lock_guard lock(mutex_);
  const double window = micros(to - from);
  for (const Track& t : tracks_) {
    double busy = 0;
    if (from < to) {
      std::vector<Interval> clipped;
      clipped.reserve(t.intervals.size());
      for (const Interval& i : t.intervals) {
        const time_point b = std::max(i.begin, from), e = std::min(i.end, to);
        if (b < e) clipped.push_back({b, e});
      }
      merge_in_place(clipped);
      clock::duration total{0};
      for (const Interval& s : clipped) total += s.end - s.begin;
      busy = micros(total) / window;
    }
    out[t.name] = busy;
  }
  return out;
}

void TraceRecorder::write_chrome_trace(const std::string& path) const {
  if (!record_slices_) {
    throw Error("TraceRecorder::write_chrome_trace(" + path +
                "): the recorder was created with record_slices=false");
  }
  nlohmann::json events = nlohmann::json::array();
  {
    std::lock_guard lock(mutex_);
    for (size_t id = 0; id < tracks_.size(); ++id) {
      events.push_back({{"name", "thread_name"},
                        {"ph", "M"},
                        {"pid", 1},
                        {"tid", id},
                        {"args", {{"name", tracks_[id].name}}}});
    }
    for (const Slice& s : slices_) {
      nlohmann::json args = nlohmann::json::object();
      if (s.requests.size() == 1) {
        args["request"] = s.requests.front();
      } else {
        args["request"] = s.requests;
      }
      for (const auto& [key, value] : s.args) args[key] = value;
      events.push_back({{"name", s.name},
                        {"cat", "vericache"},
                        {"ph", "X"},
                        {"ts", micros(s.begin - origin_)},
                        {"dur", micros(s.end - s.begin)},
                        {"pid", 1},
                        {"tid", s.track},
                        {"args", std::move(args)}});
    }
  }
  const nlohmann::json doc = {{"traceEvents", std::move(events)}, {"displayTimeUnit", "ms"}};
  std::ofstream f(path, std::ios::binary | std::ios::trunc);
  if (!f) throw Error("cannot open trace file for writing: " + path);
  f << doc.dump();
  f.close();
  if (!f) throw Error("cannot write trace file: " + path);
}

size_t TraceRecorder::slice_count() const {
  std::lock_guard lock(mutex_);
  return slice_count_;
}

}  // namespace vc
