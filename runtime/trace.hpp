// What each resource of the actor runtime (drafter, mover, verifier, scheduler)
// did and when: busy-time totals always, named slices for a Chrome/Perfetto trace
// on request.
#pragma once
#include <chrono>
#include <cstddef>
#include <cstdint>
#include <functional>
#include <initializer_list>
#include <map>
#include <mutex>
#include <span>
#include <string>
#include <string_view>
#include <utility>
#include <vector>

namespace vc {

/// Thread-safe recorder of work slices, one track per resource.
///
/// Busy time: every track keeps the [begin, end) intervals of its slices whatever
/// the order or overlap they arrive in (two threads may record to one track). The
/// list is compacted (sorted and merged into disjoint intervals) whenever it has
/// doubled since the last compaction; merging loses nothing a union query needs,
/// so busy_fraction is exact in both modes, and without record_slices memory is
/// bounded by the number of disjoint busy intervals (amortised O(log n) per
/// slice). With record_slices every slice is also kept whole (name, request ids,
/// args) for the trace file.
class TraceRecorder {
 public:
  using clock = std::chrono::steady_clock;
  using time_point = clock::time_point;

  /// record_slices=false keeps only busy-time totals (cheap, always on).
  explicit TraceRecorder(bool record_slices);

  /// A track per resource ("drafter", "mover", "verifier", "scheduler"); returns
  /// its id (0, 1, ... in order of first use). Same name → same id.
  int track(const std::string& name);

  /// One slice of work on `track` over [begin, end), tagged with the request
  /// id(s) and a name ("draft step", "layer 3 transfer", "verify pass"); `args`
  /// are extra numbers (rows, bytes). end < begin is treated as an empty slice.
  /// vc::Error for an unknown track id.
  void slice(int track, std::string_view name, std::span<const uint64_t> requests,
             time_point begin, time_point end,
             std::initializer_list<std::pair<std::string_view, double>> args = {});

  /// RAII helper: records a slice from construction to destruction. Movable, not
  /// copyable; a moved-from scope records nothing.
  class Scope {
   public:
    /// Starts the slice now.
    Scope(TraceRecorder& recorder, int track, std::string_view name, uint64_t request);
    Scope(Scope&& other) noexcept;
    Scope& operator=(Scope&&) = delete;
    Scope(const Scope&) = delete;
    Scope& operator=(const Scope&) = delete;
    /// Records [construction, now).
    ~Scope();

   private:
    TraceRecorder* recorder_;
    int track_;
    std::string name_;
    uint64_t request_;
    time_point begin_;
  };

  /// A scope recording a slice of `name` on `track` for `request` until it dies.
  [[nodiscard]] Scope scope(int track, std::string_view name, uint64_t request);

  /// Busy time per track (union of its slices' intervals, overlapping slices
  /// counted once, clipped to [from, to)) divided by to - from; keyed by track
  /// name, every track present (0 when idle). All zeros when to <= from.
  [[nodiscard]] std::map<std::string, double> busy_fraction(time_point from,
                                                            time_point to) const;

  /// Writes Chrome trace-event JSON (opens in Perfetto / chrome://tracing):
  /// {"traceEvents": [...], "displayTimeUnit": "ms"} with one "M" thread_name
  /// event per track (pid 1, tid = track id) and one "X" complete event per slice
  /// (ts and dur in µs since the recorder's creation; args.request is the id, or
  /// an array when a slice has zero or several). vc::Error naming the file if it
  /// cannot be written, or when the recorder does not record slices.
  void write_chrome_trace(const std::string& path) const;

  /// Slices recorded so far (in either mode).
  [[nodiscard]] size_t slice_count() const;

  /// Whether named slices are kept (constructor argument).
  [[nodiscard]] bool records_slices() const { return record_slices_; }

 private:
  struct Interval {
    time_point begin, end;
  };
  struct Track {
    std::string name;
    std::vector<Interval> intervals;
    size_t compacted_size = 0;  ///< intervals.size() right after the last compaction
  };
  struct Slice {
    int track = 0;
    std::string name;
    std::vector<uint64_t> requests;
    time_point begin, end;
    std::vector<std::pair<std::string, double>> args;
  };

  const bool record_slices_;
  const time_point origin_;
  mutable std::mutex mutex_;
  std::vector<Track> tracks_;
  std::map<std::string, int, std::less<>> track_ids_;
  std::vector<Slice> slices_;
  size_t slice_count_ = 0;
};

}  // namespace vc
