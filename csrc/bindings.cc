// The only file that knows about Python: m.def / py::class_ over the plain C++ core.
// C++ exceptions become Python exceptions here (std::invalid_argument -> ValueError,
// std::runtime_error -> RuntimeError). Blocking calls release the GIL.
#include <pybind11/pybind11.h>
#include <pybind11/stl.h>

#include <cmath>

#include "core/comm_classify.h"
#include "core/comm_reader.h"
#include "core/comm_ring.h"
#include "core/counters.h"
#include "core/infiniband.h"
#include "core/netdev.h"
#include "core/procstat.h"
#include "core/sampler.h"
#include "core/version.h"

namespace py = pybind11;
using namespace dynamix;

namespace {

py::object opt_double(double v) { return std::isnan(v) ? py::none() : py::cast(v); }

py::dict link_reading_dict(const LinkReading& r) {
  py::dict d;
  for (int i = 0; i < kNumLinkCounters; ++i) d[link_counter_name(i)] = r.has(i) ? py::cast(r.value[i]) : py::none();
  return d;
}

py::dict counters_dict(const std::array<double, kNumLinkCounters>& a) {
  py::dict d;
  for (int i = 0; i < kNumLinkCounters; ++i) d[link_counter_name(i)] = opt_double(a[i]);
  return d;
}

py::dict snapshot_dict(const Snapshot& s, const std::vector<std::string>& names) {
  py::dict d;
  d["seq"] = s.seq;
  d["t_s"] = s.t_ns * 1e-9;
  d["cost_s"] = s.cost_ns * 1e-9;
  py::dict links;
  for (size_t i = 0; i < s.links.size() && i < names.size(); ++i) links[py::str(names[i])] = link_reading_dict(s.links[i]);
  d["links"] = links;
  if (s.host.node) d["node_cpu_jiffies"] = py::dict(py::arg("total") = s.host.node->total, py::arg("idle") = s.host.node->idle);
  else d["node_cpu_jiffies"] = py::none();
  if (s.host.process) d["process"] = py::dict(py::arg("cpu_s") = s.host.process->cpu_ns * 1e-9, py::arg("rss_pages") = s.host.process->rss_pages);
  else d["process"] = py::none();
  if (s.host.mem) d["mem_kb"] = py::dict(py::arg("total") = s.host.mem->total_kb, py::arg("available") = s.host.mem->available_kb);
  else d["mem_kb"] = py::none();
  if (s.gpu) d["gpu"] = py::dict(py::arg("util") = s.gpu->util, py::arg("mem_used") = s.gpu->mem_used, py::arg("mem_total") = s.gpu->mem_total);
  else d["gpu"] = py::none();
  return d;
}

py::dict record_dict(const dynamix_comm_record& r) {
  return py::dict(py::arg("seq") = r.seq, py::arg("op") = r.op, py::arg("cls") = r.cls, py::arg("bytes") = r.bytes,
                  py::arg("start_ns") = r.start_ns, py::arg("end_ns") = r.end_ns, py::arg("tid") = r.tid,
                  py::arg("comm_size") = r.comm_size);
}

}  // namespace

PYBIND11_MODULE(_native, m) {
  m.doc() = "dynamix_hvd native core: metric sampler and collective-timing reader";
  m.def("version", &native_version, "Version of the native core.");
  m.def("now_s", [] { return now_ns() * 1e-9; }, "CLOCK_MONOTONIC in seconds (the clock of every timestamp here).");

  // ---- pure parsers and counter arithmetic ----
  m.def("parse_counter", [](const std::string& t) { return parse_counter(t); }, py::arg("text"),
        "Parse one sysfs counter; None for 'N/A' / malformed.");
  m.def("counter_delta", &counter_delta, py::arg("prev"), py::arg("cur"), py::arg("width_bits"), py::arg("max_delta"),
        py::arg("saturates") = false, "Trusted delta between two counter readings, or None (reset, saturation, absurd).");
  m.def("parse_proc_stat", [](const std::string& t) -> py::object {
          auto c = parse_proc_stat(t);
          if (!c) return py::none();
          return py::dict(py::arg("total") = c->total, py::arg("idle") = c->idle);
        }, py::arg("text"));
  m.def("parse_pid_stat", [](const std::string& t) -> py::object {
          auto p = parse_pid_stat(t);
          if (!p) return py::none();
          return py::dict(py::arg("cpu_ticks") = p->cpu_ticks, py::arg("rss_pages") = p->rss_pages);
        }, py::arg("text"));
  m.def("parse_statm_rss", [](const std::string& t) { return parse_statm_rss(t); }, py::arg("text"));
  m.def("parse_meminfo", [](const std::string& t) -> py::object {
          auto mi = parse_meminfo(t);
          if (!mi) return py::none();
          return py::dict(py::arg("total_kb") = mi->total_kb, py::arg("available_kb") = mi->available_kb);
        }, py::arg("text"));
  m.def("list_interfaces", &list_interfaces, py::arg("sys_root") = "/sys");
  m.def("default_interfaces", &default_interfaces, py::arg("sys_root") = "/sys");
  m.def("list_ib_ports", &list_ib_ports, py::arg("sys_root") = "/sys");

  py::class_<LinkReader>(m, "LinkReader", "Counters of one Ethernet interface or InfiniBand port.")
      .def_property_readonly("name", &LinkReader::name)
      .def_property_readonly("kind", &LinkReader::kind)
      .def_property_readonly("width_bits", &LinkReader::width_bits)
      .def_property_readonly("saturates", &LinkReader::saturates)
      .def("scale", &LinkReader::scale, py::arg("counter"))
      .def("read", [](const LinkReader& l) { return link_reading_dict(l.read()); },
           "Raw (unscaled) counters; None where the file is missing or reads 'N/A'.");
  m.def("open_netdev", &open_netdev, py::arg("sys_root"), py::arg("iface"));
  m.def("open_ib_port", &open_ib_port, py::arg("sys_root"), py::arg("dev_port"), py::arg("force_width") = 0);

  // ---- sampler ----
  py::class_<SamplerConfig>(m, "SamplerConfig")
      .def(py::init<>())
      .def_readwrite("proc_root", &SamplerConfig::proc_root)
      .def_readwrite("sys_root", &SamplerConfig::sys_root)
      .def_readwrite("pid", &SamplerConfig::pid)
      .def_readwrite("interfaces", &SamplerConfig::interfaces)
      .def_readwrite("infiniband", &SamplerConfig::infiniband)
      .def_readwrite("nvml", &SamplerConfig::nvml)
      .def_readwrite("nvml_library", &SamplerConfig::nvml_library)
      .def_readwrite("gpu_index", &SamplerConfig::gpu_index)
      .def_readwrite("period_s", &SamplerConfig::period_s)
      .def_readwrite("capacity", &SamplerConfig::capacity)
      .def_readwrite("max_link_Bps", &SamplerConfig::max_link_Bps);

  py::class_<LinkRates>(m, "LinkRates")
      .def_readonly("name", &LinkRates::name)
      .def_readonly("kind", &LinkRates::kind)
      .def_property_readonly("per_s", [](const LinkRates& r) { return counters_dict(r.per_s); })
      .def_property_readonly("delta", [](const LinkRates& r) { return counters_dict(r.delta); });

  py::class_<WindowRates>(m, "WindowRates", "Rates and gauges over a window; NaN = no data.")
      .def_readonly("start_s", &WindowRates::start_s)
      .def_readonly("end_s", &WindowRates::end_s)
      .def_readonly("samples", &WindowRates::samples)
      .def_readonly("links", &WindowRates::links)
      .def_readonly("node_cpu_util", &WindowRates::node_cpu_util)
      .def_readonly("process_cpu_cores", &WindowRates::process_cpu_cores)
      .def_readonly("process_cpu_util", &WindowRates::process_cpu_util)
      .def_readonly("mem_total_bytes", &WindowRates::mem_total_bytes)
      .def_readonly("mem_available_bytes", &WindowRates::mem_available_bytes)
      .def_readonly("mem_headroom", &WindowRates::mem_headroom)
      .def_readonly("rss_bytes", &WindowRates::rss_bytes)
      .def_readonly("gpu_util", &WindowRates::gpu_util)
      .def_readonly("gpu_mem_used_bytes", &WindowRates::gpu_mem_used_bytes)
      .def_readonly("gpu_mem_total_bytes", &WindowRates::gpu_mem_total_bytes)
      .def_readonly("gpu_mem_headroom", &WindowRates::gpu_mem_headroom);

  py::class_<SourceStats>(m, "SourceStats")
      .def_readonly("name", &SourceStats::name)
      .def_readonly("reads", &SourceStats::reads)
      .def_readonly("failures", &SourceStats::failures)
      .def_readonly("total_ns", &SourceStats::total_ns);

  py::class_<Sampler>(m, "Sampler", "Sampling thread + bounded ring of snapshots (never holds the GIL).")
      .def(py::init<const SamplerConfig&>(), py::arg("config"))
      .def("start", &Sampler::start, py::call_guard<py::gil_scoped_release>())
      .def("stop", &Sampler::stop, py::call_guard<py::gil_scoped_release>())
      .def_property_readonly("running", &Sampler::running)
      .def("sample_once", [](Sampler& s) {
             Snapshot snap;
             {
               py::gil_scoped_release nogil;
               snap = s.sample_once();
             }
             return snapshot_dict(snap, s.link_names());
           })
      .def("bench", &Sampler::bench, py::arg("n"), py::call_guard<py::gil_scoped_release>(),
           "Read every source n times (ring untouched); cost of each sample in ns.")
      .def("latest", [](const Sampler& s) -> py::object {
             std::optional<Snapshot> snap;
             {
               py::gil_scoped_release nogil;
               snap = s.latest();
             }
             if (!snap) return py::none();
             return snapshot_dict(*snap, s.link_names());
           })
      .def("rates", &Sampler::rates, py::arg("window_s") = 0.0, py::call_guard<py::gil_scoped_release>())
      .def("rates_between", [](const Sampler& s, double t0, double t1) {
             py::gil_scoped_release nogil;
             return s.rates_between(uint64_t(std::max(0.0, t0) * 1e9), uint64_t(std::max(0.0, t1) * 1e9));
           }, py::arg("t0_s"), py::arg("t1_s"))
      .def("__len__", &Sampler::size)
      .def_property_readonly("capacity", &Sampler::capacity)
      .def_property_readonly("total_samples", &Sampler::total_samples)
      .def_property_readonly("link_names", &Sampler::link_names)
      .def_property_readonly("link_kinds", &Sampler::link_kinds)
      .def_property_readonly("num_cpus", &Sampler::num_cpus)
      .def_property_readonly("gpu_available", &Sampler::gpu_available)
      .def_property_readonly("gpu_status", &Sampler::gpu_status)
      .def("source_stats", &Sampler::source_stats);

  // ---- collective timing ----
  m.attr("OP_ALLREDUCE") = int(DYNAMIX_OP_ALLREDUCE);
  m.attr("OP_IALLREDUCE") = int(DYNAMIX_OP_IALLREDUCE);
  m.attr("OP_BCAST") = int(DYNAMIX_OP_BCAST);
  m.attr("OP_ALLGATHER") = int(DYNAMIX_OP_ALLGATHER);
  m.attr("OP_ALLGATHERV") = int(DYNAMIX_OP_ALLGATHERV);
  m.attr("OP_NCCL_ALLREDUCE") = int(DYNAMIX_OP_NCCL_ALLREDUCE);
  m.attr("NUM_OPS") = int(DYNAMIX_NUM_OPS);
  m.attr("CLASS_DATA") = int(DYNAMIX_CLASS_DATA);
  m.attr("CLASS_CONTROL") = int(DYNAMIX_CLASS_CONTROL);
  m.attr("COMM_ABI") = int(DYNAMIX_COMM_ABI);

  m.def("classify_collective", [](uint32_t op, bool bitwise, bool byte_typed, bool integer_typed, uint64_t elements) {
          CollectiveFacts f{op, bitwise, byte_typed, integer_typed, elements};
          return classify_collective(f);
        }, py::arg("op"), py::arg("bitwise_or_logical_reduction"), py::arg("byte_typed"), py::arg("integer_typed"),
        py::arg("elements"), "The control/data rule of the PMPI wrapper (see docs/collector.md).");

  py::class_<CommStats>(m, "CommStats")
      .def_readonly("count", &CommStats::count)
      .def_readonly("bytes", &CommStats::bytes)
      .def_readonly("busy_s", &CommStats::busy_s)
      .def_readonly("p50_s", &CommStats::p50_s)
      .def_readonly("p90_s", &CommStats::p90_s)
      .def_readonly("p99_s", &CommStats::p99_s)
      .def_readonly("max_s", &CommStats::max_s)
      .def_readonly("bandwidth_Bps", &CommStats::bandwidth_Bps)
      .def_readonly("first_start_s", &CommStats::first_start_s)
      .def_readonly("last_end_s", &CommStats::last_end_s);

  py::class_<CommBatch>(m, "CommBatch", "Records read from the PMPI ring (kept in C++).")
      .def_readonly("next", &CommBatch::next)
      .def_readonly("lost", &CommBatch::lost)
      .def("__len__", [](const CommBatch& b) { return b.records.size(); })
      .def("summarize", [](const CommBatch& b, uint32_t op_mask, int cls) { return summarize(b.records, op_mask, cls); },
           py::arg("op_mask"), py::arg("cls") = -1, "op_mask: bits (1 << OP_*); cls: CLASS_* or -1 for both.")
      .def("records", [](const CommBatch& b) {
             py::list out;
             for (const auto& r : b.records) out.append(record_dict(r));
             return out;
           });

  py::class_<CommTotals>(m, "CommTotals")
      .def_readonly("count", &CommTotals::count)
      .def_readonly("bytes", &CommTotals::bytes)
      .def_readonly("busy_ns", &CommTotals::busy_ns);

  py::class_<CommReader>(m, "CommReader", "Reader of the preloaded libdynamix_pmpi.so recorder.")
      .def(py::init<>())
      .def_property_readonly("available", &CommReader::available)
      .def_property_readonly("status", &CommReader::status)
      .def("head", &CommReader::head)
      .def("read", &CommReader::read, py::arg("from_seq"), py::arg("max_records") = size_t(1) << 20,
           py::call_guard<py::gil_scoped_release>())
      .def("totals", &CommReader::totals, py::arg("op"), py::arg("cls"))
      .def("set_enabled", &CommReader::set_enabled, py::arg("on"))
      .def_property_readonly("enabled", &CommReader::enabled);

  // The same ring the PMPI library uses, for tests of its concurrency without MPI.
  py::class_<CommRing>(m, "_CommRing")
      .def(py::init<size_t>(), py::arg("capacity"))
      .def_property_readonly("capacity", &CommRing::capacity)
      .def("head", &CommRing::head)
      .def("record", &CommRing::record, py::arg("op"), py::arg("cls"), py::arg("bytes"), py::arg("start_ns"),
           py::arg("end_ns"), py::arg("tid") = 0, py::arg("comm_size") = 1)
      .def("hammer", [](CommRing& r, int threads, int per_thread, uint64_t bytes) {
             py::gil_scoped_release nogil;
             std::vector<std::thread> ts;
             for (int t = 0; t < threads; ++t) {
               ts.emplace_back([&r, t, per_thread, bytes] {
                 for (int i = 0; i < per_thread; ++i) r.record(DYNAMIX_OP_ALLREDUCE, DYNAMIX_CLASS_DATA, bytes, 1, 2, uint32_t(t), 1);
               });
             }
             for (auto& th : ts) th.join();
           }, py::arg("threads"), py::arg("per_thread"), py::arg("bytes"), "Record from several threads at once.")
      .def("read", [](const CommRing& r, uint64_t from, size_t max) {
             CommBatch b;
             b.records.resize(max);
             const size_t n = r.read(from, b.records.data(), max, &b.next, &b.lost);
             b.records.resize(n);
             return b;
           }, py::arg("from_seq"), py::arg("max_records"))
      .def("totals", [](const CommRing& r, uint32_t op, uint32_t cls) {
             CommTotals t;
             r.totals(op, cls, &t.count, &t.bytes, &t.busy_ns);
             return t;
           });
}
