// Chunked prefill over a full tier (see the header).
#include "runtime/streamed_prefill.hpp"

#include <algorithm>

#include "kernels/error.hpp"

namespace vc {

std::vector<float> prefill_to_tier(const Model& model, std::span<const int32_t> prompt,
                                   uint64_t id, FullTier& tier, LayerStreamer& stream,
                                   PagedKvCache& scratch, Workspace& ws, size_t chunk) {
  if (prompt.empty()) throw Error("prefill: the prompt has no tokens");
  if (chunk == 0) chunk = prompt.size();
  const size_t layers = size_t(model.config().num_layers);
  const size_t start = tier.length(id);
  std::vector<ForwardRow> rows;
  std::vector<float> logits;
  struct Restore {
    Workspace& ws;
    ~Restore() { ws.provider = nullptr; }
  } restore{ws};
  for (size_t b = 0; b < prompt.size(); b += chunk) {
    const size_t e = std::min(prompt.size(), b + chunk);
    rows.clear();
    for (size_t i = b; i < e; ++i)
      rows.push_back(ForwardRow{prompt[i], int32_t(start + i), nullptr, i + 1 == prompt.size()});
    stream.start(id, start + b, e - b, /*whole_layers=*/ws.stats != nullptr);
    ws.provider = &stream;
    forward(model, rows, scratch, ws, logits);
    ws.provider = nullptr;
    for (size_t r = 0; r < e - b; ++r)
      for (size_t l = 0; l < layers; ++l)
        tier.write(id, l, start + b + r, stream.row_k(l, r), stream.row_v(l, r));
  }
  return logits;
}

}  // namespace vc
