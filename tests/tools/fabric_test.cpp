// The fabric decision (README "Which fabric?"): the table on constructed fabrics, discovery on laid-out
// nodes (sysfs, NCCL's config files, the plugin chain), and `zipccl doctor` on each fabric the README
// names, as an administrator would run it there (ZIPCCL_FABRIC_ROOT stands for /).
#include <dlfcn.h>
#include <sys/stat.h>
#include <unistd.h>

#include <cstdlib>
#include <filesystem>
#include <string>

#include "fabric/fabric.h"
#include "temp_dir.h"

#ifndef ZIPCCL_BIN
#error "ZIPCCL_BIN, ZIPCCL_PLUGIN_PATH, FAKE_INNER_PATH and FAKE_TCPX_PATH must be defined"
#endif

namespace {

using zipccl::net::decide;
using zipccl::net::Fabric;
using zipccl::net::FabricAction;
using zipccl::net::FabricDecision;
using zipccl::net::PluginLib;
using zipccl::net::RdmaPort;
using zipccl::net::Settings;
using zipccl::net::TransportChoice;

RdmaPort port(const std::string& dev, const std::string& link, const std::string& driver, double gbps,
              const std::string& state = "4: ACTIVE") {
  RdmaPort p;
  p.device = dev;
  p.port = 1;
  p.state = state;
  p.link_layer = link;
  p.rate_gbps = gbps;
  p.driver = driver;
  return p;
}

PluginLib plugin(const std::string& request, const std::string& path, const std::string& name, int abi = 10) {
  PluginLib p;
  p.request = request;
  p.path = path;
  p.net_name = name;
  p.abi = abi;
  return p;
}

Fabric ib_node() {
  Fabric f;
  f.rdma.push_back(port("mlx5_0", "InfiniBand", "mlx5_core", 400));
  f.rdma.push_back(port("mlx5_1", "InfiniBand", "mlx5_core", 400));
  return f;
}

TEST(FabricTable, PlainTcpRunsTheSocketTransport) {
  const FabricDecision d = decide(Fabric{}, Settings{});
  EXPECT_EQ(d.action, FabricAction::kSocket);
  EXPECT_FALSE(d.explicit_choice);
  EXPECT_FALSE(d.slower_than_nccl);
}

TEST(FabricTable, InfiniBandWithNothingToWrapStepsAside) {
  const FabricDecision d = decide(ib_node(), Settings{});
  EXPECT_EQ(d.action, FabricAction::kStepAside);
  EXPECT_NE(d.why.find("2 active InfiniBand ports"), std::string::npos) << d.why;
  EXPECT_NE(d.to_compress.find("ZIPCCL_TRANSPORT=ib"), std::string::npos) << d.to_compress;
  EXPECT_NE(d.to_compress.find("ZIPCCL_NET_INNER"), std::string::npos) << d.to_compress;
  EXPECT_FALSE(d.slower_than_nccl);
}

TEST(FabricTable, RoceStepsAsideAndSaysRoce) {
  Fabric f;
  f.rdma.push_back(port("mlx5_0", "Ethernet", "mlx5_core", 200));
  const FabricDecision d = decide(f, Settings{});
  EXPECT_EQ(d.action, FabricAction::kStepAside);
  EXPECT_NE(d.why.find("RoCE"), std::string::npos) << d.why;
}

// Ports that are down, and RDMA emulated in software over a NIC (rxe, siw), are no faster fabric.
TEST(FabricTable, DownPortsAndSoftRdmaAreNoFabric) {
  Fabric f;
  f.rdma.push_back(port("mlx5_0", "InfiniBand", "mlx5_core", 400, "1: DOWN"));
  f.rdma.push_back(port("rxe0", "Ethernet", "rdma_rxe", 10));
  f.rdma.push_back(port("siw0", "Ethernet", "siw", 10));
  EXPECT_EQ(decide(f, Settings{}).action, FabricAction::kSocket);
}

TEST(FabricTable, EfaWithoutAwsOfiNcclStepsAside) {
  Fabric f;
  f.rdma.push_back(port("rdmap16s27", "Unspecified", "efa", 100));
  const FabricDecision d = decide(f, Settings{});
  EXPECT_EQ(d.action, FabricAction::kStepAside);
  EXPECT_EQ(d.rule, "EFA without aws-ofi-nccl");
  EXPECT_NE(d.to_compress.find("aws-ofi-nccl"), std::string::npos);
}

TEST(FabricTable, TheNodesNetPluginIsWrapped) {
  Fabric f;
  f.rdma.push_back(port("rdmap16s27", "Unspecified", "efa", 100));
  f.replaced.push_back(plugin("ofi", "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so", "AWS Libfabric"));
  FabricDecision d = decide(f, Settings{});
  EXPECT_EQ(d.action, FabricAction::kWrap);
  EXPECT_EQ(d.inner, "/opt/amazon/ofi-nccl/lib/libnccl-net-ofi.so");
  EXPECT_FALSE(d.explicit_choice);

  Fabric ib = ib_node();
  ib.replaced.push_back(plugin("libnccl-net.so", "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so", "IBext"));
  d = decide(ib, Settings{});
  EXPECT_EQ(d.action, FabricAction::kWrap);
  EXPECT_EQ(d.inner, "/opt/hpcx/nccl_rdma_sharp_plugin/lib/libnccl-net.so");
}

// zipccl never wraps itself, and a plugin that did not open or has only a table older than v7 is no
// candidate.
TEST(FabricTable, SelfMissingAndTooOldPluginsAreNotWrapped) {
  Fabric f = ib_node();
  PluginLib self = plugin("zipccl", "/usr/lib/libnccl-net-zipccl.so", "zipccl");
  self.self = true;
  f.replaced.push_back(self);
  PluginLib gone = plugin("ofi", "", "");
  gone.error = "not found";
  f.replaced.push_back(gone);
  f.replaced.push_back(plugin("old", "/x/libnccl-net-old.so", "old", 6));
  EXPECT_EQ(decide(f, Settings{}).action, FabricAction::kStepAside);
}

TEST(FabricTable, TcpxIsNeverReplaced) {
  Fabric f;
  f.configured = "zipccl";
  f.replaced.push_back(plugin("libnccl-net.so", "/usr/local/tcpx/lib64/libnccl-net.so", "GPUDirectTCPX"));
  FabricDecision d = decide(f, Settings{});
  EXPECT_EQ(d.action, FabricAction::kStepAside);
  EXPECT_EQ(d.rule, "TCPX-class plugin");
  // NCCL_NET_PLUGIN=zipccl alone: stepping aside, NCCL would fall back to its own sockets, not to TCPX.
  EXPECT_TRUE(d.slower_than_nccl);
  EXPECT_NE(d.slower_why.find("NCCL_NET_PLUGIN=zipccl,libnccl-net.so"), std::string::npos) << d.slower_why;
  // Listed after zipccl, NCCL goes on to it.
  f.configured = "zipccl,libnccl-net.so";
  f.after_self = {"libnccl-net.so"};
  d = decide(f, Settings{});
  EXPECT_EQ(d.action, FabricAction::kStepAside);
  EXPECT_FALSE(d.slower_than_nccl);
  // Recognised by the library's name too (TCPXO's FasTrak).
  PluginLib fastrak = plugin("x", "/usr/local/fastrak/lib64/libnccl-net.so", "something");
  EXPECT_TRUE(fastrak.device_unpack());
}

TEST(FabricTable, ExplicitSettingsAreObeyedAndSocketOnAFasterFabricIsSlower) {
  Settings s;
  s.transport = TransportChoice::kSocket;
  FabricDecision d = decide(ib_node(), s);
  EXPECT_EQ(d.action, FabricAction::kSocket);
  EXPECT_TRUE(d.explicit_choice);
  EXPECT_TRUE(d.slower_than_nccl);
  EXPECT_NE(d.slower_why.find("GPUDirect"), std::string::npos) << d.slower_why;
  EXPECT_FALSE(decide(Fabric{}, s).slower_than_nccl);  // forcing TCP on a TCP node costs nothing

  s.transport = TransportChoice::kIb;
  d = decide(ib_node(), s);
  EXPECT_EQ(d.action, FabricAction::kIb);
  EXPECT_TRUE(d.explicit_choice);

  s = Settings{};
  s.net_inner = " ofi , libnccl-net.so";
  d = decide(ib_node(), s);
  EXPECT_EQ(d.action, FabricAction::kWrap);
  EXPECT_EQ(d.inner, " ofi , libnccl-net.so");
  EXPECT_TRUE(d.explicit_choice);
}

TEST(FabricTable, InnerNoneWrapsNothing) {
  Settings s;
  s.net_inner = "none";
  EXPECT_EQ(decide(Fabric{}, s).action, FabricAction::kSocket);
  EXPECT_EQ(decide(ib_node(), s).action, FabricAction::kStepAside);
  Fabric f;
  f.configured = "zipccl";
  f.replaced.push_back(plugin("ofi", "/o/libnccl-net-ofi.so", "AWS Libfabric"));
  const FabricDecision d = decide(f, s);
  EXPECT_EQ(d.action, FabricAction::kStepAside);
  EXPECT_TRUE(d.slower_than_nccl) << "NCCL would fall back past the plugin zipccl replaced";
}

// ---- discovery on a laid-out node ----

class FabricNode : public zipccl_test::TempDirTest {
 protected:
  void SetUp() override {
    TempDirTest::SetUp();
    root_ = path("root");
    mk("sys/class/net/lo");
    for (const char* v : {"NCCL_NET_PLUGIN", "NCCL_CONF_FILE"}) unsetenv(v);
    setenv("HOME", dir_.c_str(), 1);
  }
  void TearDown() override {
    unsetenv("NCCL_NET_PLUGIN");
    TempDirTest::TearDown();
  }
  void mk(const std::string& rel) { std::filesystem::create_directories(root_ + "/" + rel); }
  void put(const std::string& rel, const std::string& text) {
    std::filesystem::create_directories(std::filesystem::path(root_ + "/" + rel).parent_path());
    write_text("root/" + rel, text + "\n");
  }
  void link(const std::string& rel, const std::string& target) {
    std::filesystem::create_directories(std::filesystem::path(root_ + "/" + rel).parent_path());
    std::filesystem::create_symlink(target, root_ + "/" + rel);
  }
  // An RDMA port as the kernel lays it out (the device's driver is a symlink).
  void rdma(const std::string& dev, const std::string& link_layer, const std::string& rate, const std::string& driver,
            const std::string& state = "4: ACTIVE") {
    const std::string b = "sys/class/infiniband/" + dev;
    put(b + "/ports/1/state", state);
    put(b + "/ports/1/link_layer", link_layer);
    put(b + "/ports/1/rate", rate);
    mk("sys/bus/pci/drivers/" + driver);
    mk(b + "/device");
    link(b + "/device/driver", "../../../../bus/pci/drivers/" + driver);
  }
  void iface(const std::string& name, const std::string& speed, const std::string& vendor) {
    put("sys/class/net/" + name + "/speed", speed);
    put("sys/class/net/" + name + "/operstate", "up");
    if (!vendor.empty()) put("sys/class/net/" + name + "/device/vendor", vendor);
  }
  std::string root_;
};

TEST_F(FabricNode, ReadsPortsAndInterfacesAsSysfsWritesThem) {
  rdma("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)", "mlx5_core");
  rdma("rdmap16s27", "Unspecified", "100 Gb/sec (4X EDR)", "efa");
  iface("eth0", "100000", "0x1d0f");
  const Fabric f = zipccl::net::discover_fabric(root_, nullptr);
  ASSERT_EQ(f.rdma.size(), 2u);
  EXPECT_EQ(f.rdma[0].device, "mlx5_0");
  EXPECT_EQ(f.rdma[0].driver, "mlx5_core");
  EXPECT_EQ(f.rdma[0].rate_gbps, 400);
  EXPECT_TRUE(f.rdma[0].active());
  EXPECT_TRUE(f.rdma[1].efa());
  EXPECT_TRUE(f.has_active_rdma());
  EXPECT_TRUE(f.has_efa());
  EXPECT_EQ(f.fastest_rdma_gbps(), 400);
  ASSERT_EQ(f.net.size(), 2u);
  EXPECT_EQ(f.net[0].name, "eth0");
  EXPECT_EQ(f.net[0].speed_mbps, 100000);
  EXPECT_EQ(f.net[0].vendor, "0x1d0f");
  EXPECT_TRUE(f.problems.empty());
}

TEST_F(FabricNode, UnreadableSysfsAndMalformedConfigAreSaid) {
  std::filesystem::remove_all(root_ + "/sys/class/net");
  put("etc/nccl.conf", "# comment\nNCCL_DEBUG=INFO\nthis line is not a setting\n=x");
  const Fabric f = zipccl::net::discover_fabric(root_, nullptr);
  ASSERT_EQ(f.problems.size(), 3u);
  EXPECT_NE(f.problems[0].find("cannot read " + root_ + "/sys/class/net"), std::string::npos) << f.problems[0];
  EXPECT_NE(f.problems[1].find("nccl.conf:3: 'this line is not a setting' is not NAME=VALUE"), std::string::npos)
      << f.problems[1];
}

// The environment's NCCL_NET_PLUGIN=zipccl overrides a config file's plugin: that one is what the node
// used, and what zipccl wraps.
TEST_F(FabricNode, AConfigFilesPluginTheEnvironmentOverrodeIsTheOneReplaced) {
  put("etc/nccl.conf", std::string("NCCL_NET_PLUGIN=") + FAKE_INNER_PATH);
  setenv("NCCL_NET_PLUGIN", "zipccl", 1);
  const Fabric f = zipccl::net::discover_fabric(root_, nullptr);
  EXPECT_EQ(f.configured, "zipccl");
  EXPECT_EQ(f.configured_from, "environment");
  ASSERT_EQ(f.replaced.size(), 1u);
  EXPECT_EQ(f.replaced[0].path, FAKE_INNER_PATH);
  EXPECT_EQ(f.replaced[0].net_name, "fake-inner");
  EXPECT_EQ(f.replaced[0].abi, 12);
  const FabricDecision d = decide(f, Settings{});
  EXPECT_EQ(d.action, FabricAction::kWrap);
  EXPECT_EQ(d.inner, FAKE_INNER_PATH);
}

// Whatever name reaches it - "zipccl", a path, a symlink - zipccl is never a plugin to wrap; what follows
// it in the list is.
TEST_F(FabricNode, ZipcclNeverWrapsItself) {
  void* lib = dlopen(ZIPCCL_PLUGIN_PATH, RTLD_NOW | RTLD_LOCAL);
  ASSERT_NE(lib, nullptr) << dlerror();
  Dl_info info{};
  ASSERT_NE(dladdr(dlsym(lib, "ncclNetPlugin_v12"), &info), 0);
  const std::string link_path = path("libnccl-net-mine.so");
  std::filesystem::create_symlink(ZIPCCL_PLUGIN_PATH, link_path);
  setenv("NCCL_NET_PLUGIN", ("zipccl," + link_path + "," + ZIPCCL_PLUGIN_PATH + ",zipccl").c_str(), 1);
  Fabric f = zipccl::net::discover_fabric(root_, info.dli_fbase);
  EXPECT_TRUE(f.replaced.empty()) << f.replaced[0].request;
  EXPECT_TRUE(f.after_self.empty());
  EXPECT_EQ(decide(f, Settings{}).action, FabricAction::kSocket);

  setenv("NCCL_NET_PLUGIN", (link_path + "," + FAKE_INNER_PATH).c_str(), 1);
  f = zipccl::net::discover_fabric(root_, info.dli_fbase);
  ASSERT_EQ(f.replaced.size(), 1u);
  EXPECT_EQ(f.replaced[0].path, FAKE_INNER_PATH);
  ASSERT_EQ(f.after_self.size(), 1u);
  EXPECT_EQ(decide(f, Settings{}).inner, FAKE_INNER_PATH);
}

// ---- zipccl doctor on each fabric ----

class DoctorFabric : public FabricNode {
 protected:
  // doctor with a clean environment, the laid-out root and `env`; exit status, output in out_.
  int doctor(const std::string& env) {
    const int st = run_here("env -i PATH=/usr/bin:/bin HOME='" + dir_ + "' NCCL_SOCKET_IFNAME=lo ZIPCCL_FABRIC_ROOT='" +
                            root_ + "' " + env + " '" ZIPCCL_BIN "' doctor --plugin '" ZIPCCL_PLUGIN_PATH
                            "' --nccl-version 2.28 > out.txt 2>&1");
    out_ = read_text("out.txt");
    return st;
  }
  bool says(const std::string& s) const { return out_.find(s) != std::string::npos; }
  // A folder standing for the loader path with `file` as a copy of `from`.
  std::string libdir(const std::string& file, const std::string& from) {
    mk("lib");
    std::filesystem::copy_file(from, root_ + "/lib/" + file);
    return root_ + "/lib";
  }
  std::string out_;
};

TEST_F(DoctorFabric, InfiniBandWithNothingToWrap) {
  rdma("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)", "mlx5_core");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl"), 0) << out_;
  EXPECT_TRUE(says("rdma      mlx5_0:1 InfiniBand   4: ACTIVE   400 Gbit/s  driver mlx5_core")) << out_;
  EXPECT_TRUE(says("decision    step aside (IB/RoCE, nothing to wrap)")) << out_;
  EXPECT_TRUE(says("init      fails, as it should: zipccl steps aside")) << out_;
  EXPECT_TRUE(says("NCCL goes on with NCCL's own IB and socket transports")) << out_;
  EXPECT_TRUE(says("verdict: OK: zipccl steps aside")) << out_;
}

TEST_F(DoctorFabric, InfiniBandWithTheNodesPluginIsWrapped) {
  rdma("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)", "mlx5_core");
  const std::string lib = libdir("libnccl-net.so", FAKE_INNER_PATH);  // NCCL's default name, as HPC-X installs it
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl LD_LIBRARY_PATH=" + lib), 0) << out_;
  EXPECT_TRUE(says("without   NCCL alone would load libnccl-net.so: " + lib + "/libnccl-net.so ('fake-inner'")) << out_;
  EXPECT_TRUE(says("decision    wrap (the node's net plugin)")) << out_;
  EXPECT_TRUE(says("verdict: OK: NCCL 2.28 would load zipccl through ncclNetPlugin_v11 with 2 device(s) "
                   "(fake-inner:fake0,fake-inner:fake1), compression auto over the inner plugin " + lib + "/libnccl-net.so")) << out_;
}

// The real nccl-rdma-sharp-plugins (tools/sharp_build.sh), installed under NCCL's default name as HPC-X
// does, on a laid-out IB node: the table picks it; without an HCA its init finds no device, so zipccl
// steps aside - as NCCL alone would find nothing there either.
TEST_F(DoctorFabric, InfiniBandWithTheRealSharpPlugin) {
  const std::string lib = std::string(SHARP_DEFAULT_DIR) + "/libnccl-net.so";
  if (access(lib.c_str(), R_OK) != 0) GTEST_SKIP() << lib << " absent (tools/sharp_build.sh builds it)";
  rdma("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)", "mlx5_core");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl LD_LIBRARY_PATH=" SHARP_DEFAULT_DIR), 0) << out_;
  EXPECT_TRUE(says("without   NCCL alone would load libnccl-net.so: " + lib + " ('NCCL RDMA Plugin")) << out_;
  EXPECT_TRUE(says("decision    wrap (the node's net plugin)")) << out_;
  EXPECT_TRUE(says("the node's net plugin " + lib + " (fabric decision): " + lib + " (IBext")) << out_;
  EXPECT_TRUE(says("init      fails: the node's plugin did not come up here")) << out_;
  EXPECT_TRUE(says("verdict: OK: zipccl steps aside (the node's net plugin)")) << out_;
}

TEST_F(DoctorFabric, Roce) {
  rdma("mlx5_0", "Ethernet", "200 Gb/sec (4X HDR)", "mlx5_core");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl"), 0) << out_;
  EXPECT_TRUE(says("why       1 active RoCE port (mlx5_0:1 200 Gbit/s)")) << out_;
  EXPECT_TRUE(says("verdict: OK: zipccl steps aside")) << out_;
}

TEST_F(DoctorFabric, EfaWithAwsOfiNcclIsWrapped) {
  rdma("rdmap16s27", "Unspecified", "100 Gb/sec (4X EDR)", "efa");
  const std::string lib = libdir("libnccl-net-ofi.so", FAKE_INNER_PATH);
  put("etc/nccl.conf", "NCCL_NET_PLUGIN=ofi");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl LD_LIBRARY_PATH=" + lib), 0) << out_;
  EXPECT_TRUE(says("(EFA)")) << out_;
  EXPECT_TRUE(says("without   NCCL alone would load ofi: " + lib + "/libnccl-net-ofi.so")) << out_;
  EXPECT_TRUE(says("decision    wrap (the node's net plugin)")) << out_;
  EXPECT_TRUE(says("compression auto over the inner plugin " + lib + "/libnccl-net-ofi.so")) << out_;
}

// The node's plugin takes GPU memory (GPUDirect RDMA, as aws-ofi-nccl on p4d/p5) while zipccl's GPU
// path is off: wrapping it would make NCCL stage every device buffer through host memory, so zipccl
// steps aside - safe only where NCCL_NET_PLUGIN lists the plugin after zipccl.
TEST_F(DoctorFabric, AGpuDirectPluginIsNotWrappedWithoutTheGpuPath) {
  rdma("rdmap16s27", "Unspecified", "100 Gb/sec (4X EDR)", "efa");
  const std::string lib = libdir("libnccl-net-ofi.so", FAKE_INNER_PATH);
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl,ofi ZIPCCL_TEST_FAKE_CUDA=1 LD_LIBRARY_PATH=" + lib), 0) << out_;
  EXPECT_TRUE(says("decision    wrap (the node's net plugin)")) << out_;
  EXPECT_TRUE(says("zipccl steps aside: wrapping " + lib + "/libnccl-net-ofi.so would take away GPUDirect RDMA")) << out_;
  EXPECT_TRUE(says("NCCL goes on with the next plugins of NCCL_NET_PLUGIN (ofi)")) << out_;
  EXPECT_TRUE(says("init      fails: zipccl steps aside rather than take a capability away")) << out_;
  EXPECT_TRUE(says("verdict: OK: zipccl steps aside (the node's net plugin): NCCL runs exactly as without it; to "
                   "compress here: ZIPCCL_GPU=on")) << out_;
  // Replaced, not listed after zipccl: NCCL would lose it.
  put("etc/nccl.conf", "NCCL_NET_PLUGIN=ofi");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl ZIPCCL_TEST_FAKE_CUDA=1 LD_LIBRARY_PATH=" + lib), 1) << out_;
  EXPECT_TRUE(says("verdict: FAIL: slower than NCCL alone: zipccl steps aside: wrapping")) << out_;
  EXPECT_TRUE(says("does not list it after zipccl")) << out_;
  // Named explicitly it is wrapped, with a WARN saying what is lost.
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl ZIPCCL_NET_INNER=ofi ZIPCCL_TEST_FAKE_CUDA=1 LD_LIBRARY_PATH=" + lib), 0)
      << out_;
  EXPECT_TRUE(says("ZIPCCL_NET_INNER=ofi: through zipccl NCCL loses GPUDirect RDMA")) << out_;
}

TEST_F(DoctorFabric, EfaWithoutAwsOfiNccl) {
  rdma("rdmap16s27", "Unspecified", "100 Gb/sec (4X EDR)", "efa");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl"), 0) << out_;
  EXPECT_TRUE(says("decision    step aside (EFA without aws-ofi-nccl)")) << out_;
  EXPECT_TRUE(says("compress  install aws-ofi-nccl")) << out_;
}

TEST_F(DoctorFabric, TcpxPluginPresent) {
  const std::string lib = libdir("libnccl-net.so", FAKE_TCPX_PATH);
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl LD_LIBRARY_PATH=" + lib), 1) << out_;
  EXPECT_TRUE(says("device-side unpack (TCPX class)")) << out_;
  EXPECT_TRUE(says("decision    step aside (TCPX-class plugin)")) << out_;
  EXPECT_TRUE(says("verdict: FAIL: slower than NCCL alone: NCCL_NET_PLUGIN=zipccl replaces libnccl-net.so")) << out_;
  // Listed after zipccl, NCCL goes on to it when zipccl steps aside.
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl,libnccl-net.so LD_LIBRARY_PATH=" + lib), 0) << out_;
  EXPECT_TRUE(says("NCCL goes on with the next plugins of NCCL_NET_PLUGIN (libnccl-net.so)")) << out_;
  EXPECT_TRUE(says("verdict: OK: zipccl steps aside (TCPX-class plugin)")) << out_;
}

TEST_F(DoctorFabric, PlainTcp) {
  iface("eth0", "25000", "");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl"), 0) << out_;
  EXPECT_TRUE(says("net       eth0         25000 Mbit/s  up")) << out_;
  EXPECT_TRUE(says("decision    socket (plain TCP)")) << out_;
  EXPECT_TRUE(says("compression auto over TCP")) << out_;
}

TEST_F(DoctorFabric, SocketForcedOnInfiniBandFails) {
  rdma("mlx5_0", "InfiniBand", "400 Gb/sec (4X NDR)", "mlx5_core");
  EXPECT_EQ(doctor("NCCL_NET_PLUGIN=zipccl ZIPCCL_TRANSPORT=socket"), 1) << out_;
  EXPECT_TRUE(says("decision    socket (ZIPCCL_TRANSPORT=socket, set explicitly)")) << out_;
  EXPECT_TRUE(says("verdict: FAIL: slower than NCCL alone: ZIPCCL_TRANSPORT=socket forces TCP on a node with 1 "
                   "active InfiniBand port")) << out_;
}

TEST_F(DoctorFabric, MalformedConfigIsANote) {
  put("etc/nccl.conf", "NCCL_NET_PLUGIN zipccl");
  doctor("NCCL_NET_PLUGIN=zipccl");
  EXPECT_TRUE(says("note: fabric: " + root_ + "/etc/nccl.conf:1: 'NCCL_NET_PLUGIN zipccl' is not NAME=VALUE")) << out_;
}

}  // namespace
