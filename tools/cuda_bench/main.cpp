// vc_cuda_bench: times the CUDA kernels on the GPU against the HBM roofline and
// checks batch invariance at real shapes; prints a table and writes JSON.
//   vc_cuda_bench [--quick] [--json FILE]   run everything
//   vc_cuda_bench --probe                   name the GPU, or say why there is none
// Exit status: 0 done, 1 error, 2 no usable GPU, 3 a batch-invariance check failed.
#include <cuda_runtime_api.h>

#include <cstdio>
#include <cstring>
#include <exception>
#include <fstream>
#include <string>

#include "tools/cuda_bench/bench.hpp"

namespace vc::cuda::bench {
namespace {

// The GPU's description, or "" with `why` set when there is none to run on.
std::string probe(std::string& why) {
  int count = 0;
  const cudaError_t err = cudaGetDeviceCount(&count);
  if (err != cudaSuccess || count == 0) {
    why = std::string("cudaGetDeviceCount returned ") + cudaGetErrorName(err) + " (" +
          cudaGetErrorString(err) + "), " + std::to_string(count) + " devices";
    return "";
  }
  cudaDeviceProp p{};
  if (cudaGetDeviceProperties(&p, 0) != cudaSuccess) {
    why = "cudaGetDeviceProperties failed";
    return "";
  }
  char tail[128];
  std::snprintf(tail, sizeof tail, ", sm_%d%d, %d SMs, %.1f GiB, L2 %d MiB", p.major, p.minor,
                p.multiProcessorCount, double(p.totalGlobalMem) / double(1 << 30),
                p.l2CacheSize >> 20);
  return std::string(p.name) + tail;
}

std::string json_escape(const std::string& s) {
  std::string o;
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o;
}

void print_table(const Report& r) {
  std::printf("device: %s\nHBM roofline: device-to-device copy %.0f GB/s (read + write)\n\n",
              r.device.c_str(), r.d2d_gbps);
  std::printf("%-10s %-46s %5s %12s %10s %12s %8s\n", "group", "case", "M", "time (us)", "GB/s",
              "roofline us", "of roof");
  for (const Row& w : r.rows) {
    std::printf("%-10s %-46s %5zu %12.2f %10.0f %12.2f %7.0f%%\n", w.group.c_str(), w.name.c_str(),
                w.rows, w.seconds * 1e6, w.gbps(), w.roofline_s * 1e6, 100.0 * w.fraction());
  }
  std::printf("\n");
  for (const Row& w : r.rows)
    if (w.group == "prefill") {
      std::printf("prefill rows: the GB/s column is GFLOP/s (2 M N K per call)\n\n");
      break;
    }
  for (const Row& w : r.rows)
    if (w.group == "verify") {
      std::printf("verify rows: the roofline is the pinned host-to-device copy of the pass's K and V\n\n");
      break;
    }
  for (const Check& c : r.checks)
    std::printf("%-4s %s (%s)\n", c.ok ? "ok" : "FAIL", c.name.c_str(), c.detail.c_str());
}

void write_json(const Report& r, const std::string& path) {
  std::ofstream f(path);
  f << "{\n  \"device\": \"" << json_escape(r.device) << "\",\n  \"d2d_gbps\": " << r.d2d_gbps
    << ",\n  \"rows\": [\n";
  for (size_t i = 0; i < r.rows.size(); ++i) {
    const Row& w = r.rows[i];
    f << "    {\"group\": \"" << json_escape(w.group) << "\", \"case\": \"" << json_escape(w.name)
      << "\", \"M\": " << w.rows << ", \"bytes\": " << w.bytes << ", \"seconds\": " << w.seconds
      << ", \"gbps\": " << w.gbps() << ", \"roofline_seconds\": " << w.roofline_s
      << ", \"fraction_of_roofline\": " << w.fraction() << "}" << (i + 1 < r.rows.size() ? "," : "")
      << "\n";
  }
  f << "  ],\n  \"checks\": [\n";
  for (size_t i = 0; i < r.checks.size(); ++i) {
    const Check& c = r.checks[i];
    f << "    {\"name\": \"" << json_escape(c.name) << "\", \"ok\": " << (c.ok ? "true" : "false")
      << ", \"detail\": \"" << json_escape(c.detail) << "\"}"
      << (i + 1 < r.checks.size() ? "," : "") << "\n";
  }
  f << "  ]\n}\n";
  if (!f) throw std::runtime_error("cannot write " + path);
}

int run(int argc, char** argv) {
  bool quick = false, probe_only = false;
  std::string json;
  for (int i = 1; i < argc; ++i) {
    if (std::strcmp(argv[i], "--quick") == 0) {
      quick = true;
    } else if (std::strcmp(argv[i], "--probe") == 0) {
      probe_only = true;
    } else if (std::strcmp(argv[i], "--json") == 0 && i + 1 < argc) {
      json = argv[++i];
    } else {
      std::fprintf(stderr, "usage: vc_cuda_bench [--quick] [--json FILE] | --probe\n");
      return 1;
    }
  }
  std::string why;
  Report r;
  r.device = probe(why);
  if (r.device.empty()) {
    std::fprintf(stderr, "no GPU: %s\n", why.c_str());
    return 2;
  }
  std::printf("GPU: %s\n", r.device.c_str());
  if (probe_only) return 0;
  bench_copies(r, quick);  // the roofline the others are held against: a failure here ends the run
  // A failing group (a CUDA error, out of memory at a large case) is a failed check;
  // the groups after it still run, and the table and JSON keep what was measured.
  const std::pair<const char*, void (*)(Report&, bool)> groups[] = {
      {"gemm", bench_gemm}, {"attention", bench_attention}, {"drafter", bench_drafter}, {"prefill", bench_prefill},
      {"verify", bench_verify}};
  for (const auto& [name, fn] : groups) {
    try {
      fn(r, quick);
    } catch (const std::exception& e) {
      (void)cudaGetLastError();
      r.checks.push_back({std::string(name) + " group ran to the end", false, e.what()});
      std::fprintf(stderr, "vc_cuda_bench: %s: %s\n", name, e.what());
    }
  }
  print_table(r);
  if (!json.empty()) write_json(r, json);
  for (const Check& c : r.checks)
    if (!c.ok) return 3;
  return 0;
}

}  // namespace
}  // namespace vc::cuda::bench

int main(int argc, char** argv) {
  try {
    return vc::cuda::bench::run(argc, argv);
  } catch (const std::exception& e) {
    std::fprintf(stderr, "vc_cuda_bench: %s\n", e.what());
    return 1;
  }
}
