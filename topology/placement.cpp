// Choosing the GPU group, actor cores, shard NUMA nodes and the fetcher's core.
#include "topology/placement.hpp"

#include <algorithm>
#include <map>
#include <numeric>

#include "kernels/error.hpp"

namespace vc {

namespace {

struct GroupScore {
  int worst = 0, sum = 0;
  bool operator<(const GroupScore& o) const {
    return worst != o.worst ? worst < o.worst : sum < o.sum;
  }
};

GroupScore score(const Topology& t, const std::vector<size_t>& g) {
  GroupScore s;
  for (size_t i = 0; i < g.size(); ++i)
    for (size_t j = i + 1; j < g.size(); ++j) {
      const int c = int(t.link(g[i], g[j]));
      s.worst = std::max(s.worst, c);
      s.sum += c;
    }
  return s;
}

// Every k-subset of n in lexicographic order while there are at most `limit` of them.
bool small_enough(size_t n, size_t k, double limit) {
  double c = 1;
  for (size_t i = 0; i < k; ++i) c = c * double(n - i) / double(i + 1);
  return c <= limit;
}

std::vector<size_t> best_group(const Topology& t, size_t k) {
  const size_t n = t.gpus.size();
  std::vector<size_t> best, cur(k);
  GroupScore best_score{};
  if (small_enough(n, k, 2e5)) {
    std::iota(cur.begin(), cur.end(), 0);
    while (true) {
      const GroupScore s = score(t, cur);
      if (best.empty() || s < best_score) best = cur, best_score = s;
      size_t i = k;
      while (i > 0 && cur[i - 1] == n - k + i - 1) --i;
      if (i == 0) break;
      ++cur[i - 1];
      for (size_t j = i; j < k; ++j) cur[j] = cur[j - 1] + 1;
    }
    return best;
  }
  // Too many subsets: grow a group greedily from each GPU, keep the best. Each step
  // adds the GPU whose links to the group give the best score (the first on a tie);
  // a candidate's worst and summed link to the group are kept up to date as the group
  // grows, so a step costs O(n), not a rescoring of the whole group per candidate.
  std::vector<int> worst_to(n), sum_to(n);
  std::vector<char> in_group(n);
  for (size_t first = 0; first < n; ++first) {
    std::vector<size_t> g{first};
    std::fill(in_group.begin(), in_group.end(), 0);
    in_group[first] = 1;
    GroupScore gs{};
    for (size_t c = 0; c < n; ++c) worst_to[c] = sum_to[c] = int(t.link(first, c));
    while (g.size() < k) {
      size_t pick = n;
      GroupScore ps{};
      for (size_t c = 0; c < n; ++c) {
        if (in_group[c]) continue;
        const GroupScore s{std::max(gs.worst, worst_to[c]), gs.sum + sum_to[c]};
        if (pick == n || s < ps) pick = c, ps = s;
      }
      g.push_back(pick);
      in_group[pick] = 1;
      gs = ps;
      for (size_t c = 0; c < n; ++c) {
        const int l = int(t.link(pick, c));
        worst_to[c] = std::max(worst_to[c], l);
        sum_to[c] += l;
      }
    }
    std::sort(g.begin(), g.end());
    const GroupScore s = score(t, g);
    if (best.empty() || s < best_score) best = g, best_score = s;
  }
  return best;
}

std::vector<unsigned> pus_of(const Topology& t, const std::vector<unsigned>& cores) {
  std::vector<unsigned> pus;
  for (unsigned c : cores) pus.insert(pus.end(), t.cores.at(c).pus.begin(), t.cores.at(c).pus.end());
  std::sort(pus.begin(), pus.end());
  return pus;
}

std::vector<unsigned> all_cores(const Topology& t) {
  std::vector<unsigned> v;
  for (const auto& c : t.cores) v.push_back(c.logical);
  return v;
}

// The local NUMA node with the most memory.
unsigned shard_node(const Topology& t, const std::vector<unsigned>& local) {
  unsigned best = local.front();
  for (unsigned n : local)
    if (t.node(n).memory_bytes > t.node(best).memory_bytes) best = n;
  return best;
}

std::string where(const Topology& t, size_t gpu) {
  const auto& p = t.gpus[gpu].pci;
  return "GPU " + p.bus_id + (p.root.empty() ? "" : " (host bridge " + p.root + ")");
}

}  // namespace

const ActorPlace& Placement::actor(const std::string& name, int rank) const {
  for (const auto& a : actors)
    if (a.actor == name && a.rank == rank) return a;
  throw Error("placement: no actor " + name + " of rank " + std::to_string(rank));
}

Placement plan_placement(const Topology& t, size_t tp) {
  if (tp == 0) throw Error("--tp 0: the tensor-parallel degree must be at least 1");
  const bool cpu = t.gpus.empty();
  if (!cpu && tp > t.gpus.size())
    throw Error("--tp " + std::to_string(tp) + ": topology " + t.source + " has only " +
                std::to_string(t.gpus.size()) + " GPU(s)");
  Placement p;
  p.tp = tp;

  // Per rank: the cores local to it, the NUMA node of its shard, and why.
  std::vector<std::vector<unsigned>> local(tp);
  std::vector<std::string> locality(tp);
  if (cpu) {
    std::vector<const NumaNode*> nodes;
    for (const auto& n : t.numa)
      if (!n.cores.empty()) nodes.push_back(&n);
    std::stable_sort(nodes.begin(), nodes.end(),
                     [](auto* a, auto* b) { return a->cores.size() > b->cores.size(); });
    p.group_reason = "no GPU in the topology: " + std::to_string(tp) +
                     " CPU rank(s), spread over the NUMA nodes with the most cores";
    for (size_t r = 0; r < tp; ++r) {
      const NumaNode* n = nodes.empty() ? nullptr : nodes[r % nodes.size()];
      local[r] = n == nullptr ? all_cores(t) : n->cores;
      const unsigned node = n == nullptr ? t.numa.front().os_index : n->os_index;
      locality[r] = "cores of NUMA node P#" + std::to_string(node) + " (CPU rank " + std::to_string(r) + ")";
      p.shards.push_back({r, node, "NUMA node P#" + std::to_string(node) + " holds CPU rank " +
                                       std::to_string(r) + "'s cores"});
    }
  } else {
    p.gpus = best_group(t, tp);
    const GroupScore s = score(t, p.gpus);
    p.worst_link = LinkClass(s.worst);
    if (tp == 1) {
      p.group_reason = "one rank: the first GPU in bus id order";
    } else {
      p.group_reason = std::string("every pair is at worst ") + link_class_name(p.worst_link) +
                       ", the best worst-pair link of any " + std::to_string(tp) +
                       " GPUs (links from " + t.links_from + ")";
    }
    for (size_t r = 0; r < tp; ++r) {
      const auto& pci = t.gpus[p.gpus[r]].pci;
      local[r] = pci.cores.empty() ? all_cores(t) : pci.cores;
      locality[r] = "cores local to " + where(t, p.gpus[r]);
      if (pci.numa.empty()) {
        p.shards.push_back({r, t.numa.front().os_index,
                            "hwloc gives " + where(t, p.gpus[r]) + " no local NUMA node: the first"});
      } else {
        const unsigned n = shard_node(t, pci.numa);
        p.shards.push_back({r, n, "NUMA node P#" + std::to_string(n) + " is local to " + where(t, p.gpus[r]) +
                                      ": the mover's copies do not cross sockets"});
      }
    }
  }

  // The fetcher: a core local to the NIC (the first NIC with local cores).
  const Nic* nic = nullptr;
  for (const auto& n : t.nics)
    if (!n.pci.cores.empty()) {
      nic = &n;
      break;
    }
  const std::vector<unsigned> nic_cores = nic != nullptr ? nic->pci.cores : local[0];

  // Ranks that share a set of local cores split it; the fetcher's core is set apart
  // first when that leaves each of them 3 cores.
  std::map<std::vector<unsigned>, std::vector<size_t>> sharing;
  for (size_t r = 0; r < tp; ++r) sharing[local[r]].push_back(r);
  std::vector<unsigned> fetcher_core;
  bool fetcher_alone = false;
  for (auto& [cores, ranks] : sharing) {
    std::vector<unsigned> pool = cores;
    if (fetcher_core.empty() && cores == nic_cores && pool.size() >= 3 * ranks.size() + 1) {
      fetcher_core = {pool.back()};
      pool.pop_back();
      fetcher_alone = true;
    }
    const size_t per = std::max<size_t>(1, pool.size() / ranks.size());
    for (size_t i = 0; i < ranks.size(); ++i) {
      const size_t r = ranks[i];
      std::vector<unsigned> share;
      for (size_t k = 0; k < per; ++k) share.push_back(pool[(i * per + k) % pool.size()]);
      const bool shared = pool.size() < ranks.size();
      const std::string why = locality[r] + (ranks.size() > 1 ? ", split among " + std::to_string(ranks.size()) +
                                                                   " ranks" : "") +
                              (shared ? " (fewer cores than ranks: shared)" : "");
      const int ri = int(r);
      if (cpu) {
        // A CPU rank's drafter and verifier are its compute: each runs its threads
        // over every core of the rank's share (they overlap across requests, as
        // unbound threads would); the mover's copies and commits share them.
        const std::string each = why + "; CPU rank: its compute spans every core of the rank";
        p.actors.push_back({"drafter", ri, share, pus_of(t, share), each});
        p.actors.push_back({"verifier", ri, share, pus_of(t, share), each});
        p.actors.push_back({"mover", ri, share, pus_of(t, share),
                            locality[r] + "; CPU rank: the copy loop shares the rank's cores"});
        continue;
      }
      std::vector<unsigned> mover{share.back()}, drafter, verifier;
      if (share.size() == 1) {
        drafter = verifier = share;
      } else if (share.size() == 2) {
        drafter = verifier = {share[0]};
      } else {
        const size_t d = (share.size() - 1 + 1) / 2;
        drafter.assign(share.begin(), share.begin() + long(d));
        verifier.assign(share.begin() + long(d), share.end() - 1);
      }
      const std::string dv = share.size() <= 2 ? "; drafter and verifier share core " : "";
      p.actors.push_back({"drafter", ri, drafter, pus_of(t, drafter),
                          why + (share.size() <= 2 ? dv + format_index_list(drafter) : "; half of the rank's cores")});
      p.actors.push_back({"verifier", ri, verifier, pus_of(t, verifier),
                          why + (share.size() <= 2 ? dv + format_index_list(verifier) : "; the other half")});
      p.actors.push_back({"mover", ri, mover, pus_of(t, mover),
                          locality[r] + (share.size() > 1 ? "; a core of its own for the copy loop"
                                                          : "; shared, the only core")});
    }
  }
  if (fetcher_core.empty()) {
    // Share the NIC-local core that carries the fewest actors (the last on a tie).
    std::map<unsigned, size_t> load;
    for (const auto& a : p.actors)
      for (unsigned c : a.cores) ++load[c];
    unsigned best = nic_cores.front();
    for (unsigned c : nic_cores)
      if (load[c] <= load[best]) best = c;
    fetcher_core = {best};
  }
  std::string why = nic != nullptr ? "core local to NIC " + nic->pci.bus_id +
                                         (nic->name.empty() ? "" : " (" + nic->name + ")")
                                   : "no NIC in the topology: a core of rank 0's locality";
  why += fetcher_alone ? ", set apart for it" : ", shared with the actors there";
  p.actors.push_back({"fetcher", -1, fetcher_core, pus_of(t, fetcher_core), why});
  return p;
}

}  // namespace vc
