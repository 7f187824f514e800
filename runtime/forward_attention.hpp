// The attention step of forward() (runtime/forward.cpp, runtime/forward_device.cpp):
// each row's queries (Workspace::q) against the KV it reads, into Workspace::attn.
#pragma once
#include <cstddef>
#include <span>
#include <vector>

#include "kvtiers/paged_kv_cache.hpp"
#include "runtime/forward.hpp"

namespace vc {

class AttentionBackend;
class DeviceRows;

/// Where a pass's queries and outputs are when its rows stay on the device: null
/// `rows` for a pass on the host (ws.q and ws.attn hold them). With rows, the
/// device's q and attn buffers hold them; the CPU attends for a row only from a
/// host copy of the queries (q_to_host) and its outputs go up afterwards
/// (upload_host_rows).
struct RowsIo {
  DeviceRows* rows = nullptr;
  size_t M = 0, qd = 0;
  bool q_on_host = false;         // ws.q holds this layer's queries
  std::vector<size_t> host_rows;  // rows whose outputs the CPU computed into ws.attn

  /// Makes ws.q hold the layer's queries (a copy down, once per layer, with rows).
  void q_to_host(Workspace& ws);
  /// Rows [r0, r1) were attended on the CPU: their outputs go up (with rows).
  void attended_on_host(size_t r0, size_t r1);
  /// Copies the CPU's outputs of the rows named up into the device's attn buffer.
  void upload_host_rows(const Workspace& ws);
};

/// Attention of every row over the cache (and the compressed views of draft rows):
/// runs of rows of one sequence without views go tile by tile; the other rows are
/// independent, split across the pool. With `device`, the rows without views attend
/// there, and the draft rows too when their views are in a form it reads, unless
/// statistics want each row's softmax maximum and sum (`max_sum`, [M, heads, 2]),
/// which the device does not return: the CPU then attends too, for them, and the
/// device's outputs are used.
void attend_cached(const ModelConfig& c, const PagedKvCache& cache, size_t l,
                   std::span<const ForwardRow> rows, float scale, Workspace& ws, float* max_sum,
                   AttentionBackend* device, RowsIo& io);

/// Attention of rows [r0, r0 + rows.size()) of the pass over KV streamed in by
/// `provider`, chunk by chunk in position order: each row's bits equal a pass over a
/// cache holding the same KV. With `device`, each chunk is staged there before it is
/// released and the rows attend there once the last has come; the CPU then attends
/// only when statistics want the rows' softmax maxima and sums.
void attend_streamed(const ModelConfig& c, LayerKvProvider& provider, size_t l,
                     std::span<const ForwardRow> rows, size_t r0, float scale, Workspace& ws,
                     AttentionBackend* device, RowsIo& io);

/// The attention step of layer `l` for the pass's rows, their queries, keys and
/// values computed (ws.q unless io.rows holds them; ws.k and ws.v always, the host
/// writing them): each row's K and V written where its KV lives (the cache, or the
/// providers of ws.providers), then attend_cached or attend_streamed, the prefill
/// statistics observed, and with io.rows the CPU's outputs sent up.
void attend_layer(const Model& model, std::span<const ForwardRow> rows, PagedKvCache& cache,
                  size_t l, Workspace& ws, RowsIo& io);

/// forward() for a model whose LinearBackend keeps rows on its device
/// (runtime/forward_device.cpp): rows and tokens checked, ws.positions set.
void forward_on_device(const Model& model, DeviceRows& dev, std::span<const ForwardRow> rows,
                       PagedKvCache& cache, Workspace& ws, std::vector<float>& logits);

/// Throws unless the providers' ranges cover rows [0, M) in order (and gather no
/// statistics over several providers).
void check_providers(const Workspace& ws, size_t M);

}  // namespace vc
