// Loads cuBLASLt's entry points (see cublaslt_library.hpp).
#include "runtime/cuda/cublaslt_library.hpp"

#include <cublas_api.h>
#include <dlfcn.h>

namespace vc::cuda_backend {
namespace {

struct Loaded {
  CublasLt lib{};
  bool ok = false;
  std::string why;
};

template <typename F>
bool bind(void* handle, const char* name, F& slot, std::string& why) {
  slot = reinterpret_cast<F>(dlsym(handle, name));
  if (slot == nullptr && why.empty()) why = std::string("cuBLASLt has no ") + name;
  return slot != nullptr;
}

Loaded load() {
  Loaded l;
  const std::string versioned = "libcublasLt.so." + std::to_string(CUBLAS_VER_MAJOR);
  void* h = dlopen(versioned.c_str(), RTLD_NOW | RTLD_LOCAL);
  if (h == nullptr) {
    const char* e = dlerror();
    l.why = "cannot load " + versioned + " (" + (e != nullptr ? e : "dlopen failed") + ")";
    return l;
  }
  CublasLt& c = l.lib;
  bool ok = bind(h, "cublasLtCreate", c.create, l.why);
  ok = bind(h, "cublasLtDestroy", c.destroy, l.why) && ok;
  ok = bind(h, "cublasLtGetStatusName", c.status_name, l.why) && ok;
  ok = bind(h, "cublasLtGetStatusString", c.status_string, l.why) && ok;
  ok = bind(h, "cublasLtMatmulDescCreate", c.desc_create, l.why) && ok;
  ok = bind(h, "cublasLtMatmulDescDestroy", c.desc_destroy, l.why) && ok;
  ok = bind(h, "cublasLtMatmulDescSetAttribute", c.desc_set, l.why) && ok;
  ok = bind(h, "cublasLtMatrixLayoutCreate", c.layout_create, l.why) && ok;
  ok = bind(h, "cublasLtMatrixLayoutDestroy", c.layout_destroy, l.why) && ok;
  ok = bind(h, "cublasLtMatmulPreferenceCreate", c.pref_create, l.why) && ok;
  ok = bind(h, "cublasLtMatmulPreferenceDestroy", c.pref_destroy, l.why) && ok;
  ok = bind(h, "cublasLtMatmulPreferenceSetAttribute", c.pref_set, l.why) && ok;
  ok = bind(h, "cublasLtMatmulAlgoGetHeuristic", c.heuristic, l.why) && ok;
  ok = bind(h, "cublasLtMatmulAlgoConfigGetAttribute", c.algo_get, l.why) && ok;
  ok = bind(h, "cublasLtMatmul", c.matmul, l.why) && ok;
  ok = bind(h, "cublasLtGetVersion", c.version, l.why) && ok;
  l.ok = ok;  // the handle stays open for the process's life
  return l;
}

}  // namespace

std::string CublasLt::status(cublasStatus_t s) const {
  return std::string(status_name(s)) + " (" + status_string(s) + ")";
}

const CublasLt* cublaslt(std::string* why) {
  static const Loaded loaded = load();
  if (!loaded.ok && why != nullptr) *why = loaded.why;
  return loaded.ok ? &loaded.lib : nullptr;
}

}  // namespace vc::cuda_backend
