// `vericache topo`: what hwloc sees (live or a recorded XML), the placement for a
// tensor-parallel degree with the reason for each choice, and, on this machine, the
// placement applied (threads bound and checked, shard memory bound and checked).
#include <iostream>

#include <fmt/format.h>
#include <nlohmann/json.hpp>

#include "kernels/error.hpp"
#include "tools/vericache/commands.hpp"
#include "tools/vericache/options.hpp"
#include "topology/binding.hpp"

namespace vc::cli {

namespace {

struct TopoArgs {
  std::string topology;  // empty: this machine
  bool topology_given = false;
  size_t tp = 1;
  bool json = false;
};

double gib(uint64_t b) { return double(b) / double(1ull << 30); }

std::string pci_ids(const PciPlace& p) {
  return fmt::format("[{:04x}:{:04x}] class {:04x}", p.vendor, p.device, p.class_id);
}

nlohmann::json place_json(const PciPlace& p) {
  return {{"bus_id", p.bus_id}, {"vendor", fmt::format("{:04x}", p.vendor)},
          {"device", fmt::format("{:04x}", p.device)}, {"class", fmt::format("{:04x}", p.class_id)},
          {"link_gbytes_s", p.link_gbytes_s}, {"numa", p.numa}, {"cores", p.cores},
          {"host_bridge", p.root}, {"path", p.path}};
}

nlohmann::json to_json(const Topology& t, const Placement& p, const std::vector<AppliedPlace>& applied) {
  nlohmann::json j;
  j["source"] = t.source;
  j["this_system"] = t.this_system;
  j["packages"] = t.packages;
  for (const auto& n : t.numa)
    j["numa"].push_back({{"os_index", n.os_index}, {"memory_bytes", n.memory_bytes}, {"cores", n.cores}});
  for (const auto& c : t.cores) j["cores"].push_back({{"logical", c.logical}, {"numa", c.numa}, {"pus", c.pus}});
  j["gpus"] = nlohmann::json::array();
  for (const auto& g : t.gpus) {
    auto e = place_json(g.pci);
    e["model"] = g.model;
    e["memory_bytes"] = g.memory_bytes;
    j["gpus"].push_back(e);
  }
  j["nics"] = nlohmann::json::array();
  for (const auto& n : t.nics) {
    auto e = place_json(n.pci);
    e["name"] = n.name;
    j["nics"].push_back(e);
  }
  j["links_from"] = t.links_from;
  j["links"] = nlohmann::json::array();
  for (size_t a = 0; a < t.gpus.size(); ++a)
    for (size_t b = a + 1; b < t.gpus.size(); ++b)
      j["links"].push_back({{"a", t.gpus[a].pci.bus_id}, {"b", t.gpus[b].pci.bus_id},
                            {"class", link_class_key(t.link(a, b))}});
  nlohmann::json pl;
  pl["tp"] = p.tp;
  pl["gpus"] = nlohmann::json::array();
  for (size_t g : p.gpus) pl["gpus"].push_back(t.gpus[g].pci.bus_id);
  pl["worst_link"] = link_class_key(p.worst_link);
  pl["group_reason"] = p.group_reason;
  for (const auto& a : p.actors)
    pl["actors"].push_back({{"actor", a.actor}, {"rank", a.rank}, {"cores", a.cores}, {"pus", a.pus},
                            {"reason", a.reason}});
  for (const auto& s : p.shards)
    pl["shards"].push_back({{"rank", s.rank}, {"numa", s.numa}, {"reason", s.reason}});
  j["placement"] = pl;
  for (const auto& a : applied)
    j["applied"].push_back({{"what", a.what}, {"applied", a.applied}, {"detail", a.detail}});
  return j;
}

void print(const Topology& t, const Placement& p, const std::vector<AppliedPlace>& applied) {
  std::cout << fmt::format("topology: {}{}\n", t.source, t.this_system ? "" : " (recorded, not this machine)");
  std::cout << fmt::format("  {} package(s), {} NUMA node(s), {} core(s)\n", t.packages, t.numa.size(),
                           t.cores.size());
  for (const auto& n : t.numa) {
    std::vector<unsigned> pus;
    for (unsigned c : n.cores) pus.insert(pus.end(), t.cores[c].pus.begin(), t.cores[c].pus.end());
    std::sort(pus.begin(), pus.end());
    std::cout << fmt::format("  NUMA node P#{}: {:.1f} GiB, cores {} (PUs {})\n", n.os_index,
                             gib(n.memory_bytes), format_index_list(n.cores), format_index_list(pus));
  }
  if (t.gpus.empty()) std::cout << "  GPUs: none (NVIDIA PCI devices, vendor 10de class 03xx)\n";
  for (const auto& g : t.gpus)
    std::cout << fmt::format("  GPU {} {} {}{}, {:.1f} GB/s PCIe, NUMA node(s) P#{}, cores {}, via {}\n",
                             g.pci.bus_id, pci_ids(g.pci), g.model,
                             g.memory_bytes ? fmt::format(" {:.1f} GiB", gib(g.memory_bytes)) : "",
                             g.pci.link_gbytes_s, format_index_list(g.pci.numa), format_index_list(g.pci.cores),
                             g.pci.path.empty() ? std::string("?") : fmt::format("{}", fmt::join(g.pci.path, " > ")));
  if (t.nics.empty()) std::cout << "  NICs: none\n";
  for (const auto& n : t.nics)
    std::cout << fmt::format("  NIC {} {}{}, NUMA node(s) P#{}, cores {}\n", n.pci.bus_id, pci_ids(n.pci),
                             n.name.empty() ? "" : " " + n.name, format_index_list(n.pci.numa),
                             format_index_list(n.pci.cores));
  if (t.gpus.size() > 1) {
    std::cout << fmt::format("  links between GPUs (from {}):\n", t.links_from);
    for (size_t a = 0; a < t.gpus.size(); ++a)
      for (size_t b = a + 1; b < t.gpus.size(); ++b)
        std::cout << fmt::format("    {} - {}: {}\n", t.gpus[a].pci.bus_id, t.gpus[b].pci.bus_id,
                                 link_class_name(t.link(a, b)));
  }
  std::cout << fmt::format("\nplacement, tensor-parallel degree {}:\n", p.tp);
  std::string group;
  for (size_t g : p.gpus) group += (group.empty() ? "" : ", ") + t.gpus[g].pci.bus_id;
  std::cout << fmt::format("  group: {}\n    why: {}\n", group.empty() ? "CPU ranks" : group, p.group_reason);
  for (size_t r = 0; r < p.tp; ++r) {
    std::cout << fmt::format("  rank {}{}\n", r, p.gpus.empty() ? "" : ": GPU " + t.gpus[p.gpus[r]].pci.bus_id);
    std::cout << fmt::format("    full-KV shard on NUMA node P#{}\n      why: {}\n", p.shards[r].numa,
                             p.shards[r].reason);
    for (const auto& a : p.actors)
      if (a.rank == int(r))
        std::cout << fmt::format("    {:<8} cores {} (PUs {})\n      why: {}\n", a.actor, format_index_list(a.cores),
                                 format_index_list(a.pus), a.reason);
  }
  const ActorPlace& f = p.actor("fetcher", -1);
  std::cout << fmt::format("  fetcher  cores {} (PUs {})\n    why: {}\n", format_index_list(f.cores),
                           format_index_list(f.pus), f.reason);
  std::cout << "\napplied:\n";
  for (const auto& a : applied)
    std::cout << fmt::format("  {:<16} {} {}\n", a.what, a.applied ? "ok " : "no ", a.detail);
}

int run_topo(const TopoArgs& a) {
  if (a.topology_given && a.topology.empty())
    throw Error("--topology '': empty path; expected an hwloc XML file (leave it out for this machine)");
  HwlocTopology h(a.topology);
  const Topology t = h.read();
  const Placement p = plan_placement(t, a.tp);
  const auto applied = apply_placement(h, p);
  if (a.json) std::cout << to_json(t, p, applied).dump(2) << "\n";
  else print(t, p, applied);
  for (const auto& x : applied)
    if (t.this_system && !x.applied) return 2;  // binding failed on this machine
  return 0;
}

}  // namespace

void add_topo_command(CLI::App& app, Runner& run) {
  auto a = std::make_shared<TopoArgs>();
  CLI::App* cmd = app.add_subcommand("topo", "Show the topology hwloc sees and the placement chosen");
  cmd->add_option("--topology", a->topology, "A recorded hwloc XML topology (default: this machine)");
  cmd->add_option("--tp", a->tp, "Tensor-parallel degree")->capture_default_str()->check(integer_in(1, 1024));
  cmd->add_flag("--json", a->json, "Print JSON");
  cmd->callback([&run, a, cmd] {
    a->topology_given = cmd->count("--topology") > 0;
    run = [a] { return run_topo(*a); };
  });
}

}  // namespace vc::cli
