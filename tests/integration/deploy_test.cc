// The files that run sluice elsewhere stay valid: the
// systemd unit (`systemd-analyze verify` when systemd is installed, and its
// structure always), the Kubernetes manifest (every document parsed, the
// fields a Deployment needs, probes pointing at real ports and paths, the
// ConfigMap's config accepted by `sluice --check-config`), the image's
// default config and HEALTHCHECK, and docker-compose.yml (health-gated
// depends_on; `docker-compose config -q` when installed).

#include <gtest/gtest.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <sstream>

#include "config/loader.h"
#include "tests/support/processes.h"

namespace sluice::test {
namespace {

std::string readSource(const std::string& relative) {
  std::ifstream in(sourceDir() + "/" + relative);
  EXPECT_TRUE(in.good()) << relative;
  std::ostringstream text;
  text << in.rdbuf();
  return text.str();
}

std::string tempFile(const std::string& name, const std::string& text) {
  const auto dir =
      std::filesystem::temp_directory_path() / ("sluice-deploy-" + std::to_string(::getpid()));
  std::filesystem::create_directories(dir);
  const auto path = dir / name;
  std::ofstream(path) << text;
  return path.string();
}

bool haveCommand(const std::string& name) {
  return runCommand("command -v " + name + " >/dev/null 2>&1").first == 0;
}

// `sluice --check-config` on `yaml`: the output ("" when it printed nothing but ok).
std::pair<int, std::string> checkConfig(const std::string& name, const std::string& yaml) {
  return runCommand(sluicePath() + " --check-config " + tempFile(name, yaml));
}

// --- systemd -----------------------------------------------------------------

// "Key=value" lines of an INI-style unit, by section (a key may repeat).
std::map<std::string, std::multimap<std::string, std::string>> parseUnit(const std::string& text) {
  std::map<std::string, std::multimap<std::string, std::string>> sections;
  std::string section;
  std::istringstream in(text);
  for (std::string line; std::getline(in, line);) {
    if (line.empty() || line[0] == '#' || line[0] == ';') continue;
    if (line.front() == '[') {
      EXPECT_EQ(line.back(), ']') << line;
      section = line.substr(1, line.size() - 2);
      continue;
    }
    const size_t eq = line.find('=');
    EXPECT_NE(eq, std::string::npos) << "not Key=value: " << line;
    EXPECT_FALSE(section.empty()) << "a key before any section: " << line;
    if (eq != std::string::npos) sections[section].emplace(line.substr(0, eq), line.substr(eq + 1));
  }
  return sections;
}

std::vector<std::string> values(const std::multimap<std::string, std::string>& section,
                                const std::string& key) {
  std::vector<std::string> out;
  for (auto [it, end] = section.equal_range(key); it != end; ++it) out.push_back(it->second);
  return out;
}

TEST(DeployTest, SystemdUnitRunsReloadsAndStopsSluice) {
  const std::string unit = readSource("deploy/systemd/sluice.service");
  auto sections = parseUnit(unit);
  ASSERT_EQ(sections.count("Unit"), 1u);
  ASSERT_EQ(sections.count("Service"), 1u);
  ASSERT_EQ(sections.count("Install"), 1u);
  const auto& service = sections["Service"];
  EXPECT_EQ(values(service, "ExecStart"),
            std::vector<std::string>{"/usr/local/bin/sluice --config /etc/sluice/sluice.yaml"});
  const auto reload = values(service, "ExecReload");
  ASSERT_FALSE(reload.empty());
  EXPECT_EQ(reload.back(), "/bin/kill -HUP $MAINPID") << "reload is SIGHUP (README: Reload)";
  EXPECT_EQ(values(service, "KillSignal"), std::vector<std::string>{"SIGTERM"}) << "SIGTERM drains";
  const auto stop = values(service, "TimeoutStopSec");
  ASSERT_EQ(stop.size(), 1u);
  EXPECT_GT(std::stoi(stop[0]), 30) << "must exceed the default drain_timeout (30s)";
  EXPECT_EQ(values(sections["Install"], "WantedBy"), std::vector<std::string>{"multi-user.target"});

  if (!haveCommand("systemd-analyze")) {
    GTEST_SKIP() << "systemd-analyze not installed: structure checked only";
  }
  // verify also checks that every Exec binary exists: point them at the built one.
  const std::string local =
      std::regex_replace(unit, std::regex("/usr/local/bin/sluice"), sluicePath());
  const std::string path = tempFile("sluice.service", local);
  auto [code, out] = runCommand("cd " + std::filesystem::path(path).parent_path().string() +
                                " && systemd-analyze verify --man=no ./sluice.service");
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out, "") << "systemd-analyze found problems";
}

// --- Kubernetes --------------------------------------------------------------

// Fails the test unless `node[key]` exists and is of `type`.
YAML::Node need(const YAML::Node& node, const std::string& key, YAML::NodeType::value type,
                const std::string& where) {
  const YAML::Node child = node[key];
  EXPECT_TRUE(child.IsDefined() && child.Type() == type) << where << "." << key;
  return child;
}

TEST(DeployTest, KubernetesManifestIsAValidDeploymentWithItsConfigMap) {
  const std::vector<YAML::Node> docs = YAML::LoadAll(readSource("deploy/kubernetes/sluice.yaml"));
  std::map<std::string, YAML::Node> by_name;  // "Kind/name"
  for (const YAML::Node& doc : docs) {
    ASSERT_TRUE(doc.IsMap());
    const std::string kind = doc["kind"].as<std::string>("");
    ASSERT_FALSE(kind.empty());
    need(doc, "apiVersion", YAML::NodeType::Scalar, kind);
    const std::string name =
        need(need(doc, "metadata", YAML::NodeType::Map, kind), "name", YAML::NodeType::Scalar, kind)
            .as<std::string>();
    EXPECT_EQ(by_name.count(kind + "/" + name), 0u) << "one " << kind << "/" << name;
    by_name[kind + "/" + name] = doc;
  }
  ASSERT_EQ(by_name.size(), 7u);
  const YAML::Node config_map = by_name["ConfigMap/sluice"];
  const YAML::Node deployment = by_name["Deployment/sluice"];
  const YAML::Node service = by_name["Service/sluice"];
  ASSERT_TRUE(config_map && deployment && service);
  EXPECT_EQ(config_map["apiVersion"].as<std::string>(), "v1");
  EXPECT_EQ(deployment["apiVersion"].as<std::string>(), "apps/v1");
  EXPECT_EQ(service["apiVersion"].as<std::string>(), "v1");

  // The ConfigMap's config is one sluice accepts, listening where the pod's ports say.
  const std::string config_text = need(need(config_map, "data", YAML::NodeType::Map, "ConfigMap"),
                                       "sluice.yaml", YAML::NodeType::Scalar, "ConfigMap.data")
                                      .as<std::string>();
  auto [code, out] = checkConfig("k8s-sluice.yaml", config_text);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("warning"), std::string::npos) << out;
  const config::LoadResult loaded = config::loadConfigString(config_text, "configmap");
  ASSERT_TRUE(loaded.ok()) << loaded.error->toString();
  const config::Config& cfg = *loaded.config;

  // Deployment: selector matches the template, probes and preStop in place.
  const YAML::Node spec = need(deployment, "spec", YAML::NodeType::Map, "Deployment");
  const YAML::Node selector = need(need(spec, "selector", YAML::NodeType::Map, "spec"),
                                   "matchLabels", YAML::NodeType::Map, "spec.selector");
  const YAML::Node pod = need(spec, "template", YAML::NodeType::Map, "spec");
  const YAML::Node labels = need(need(pod, "metadata", YAML::NodeType::Map, "template"), "labels",
                                 YAML::NodeType::Map, "template.metadata");
  for (const auto& kv : selector) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>())
        << "selector label " << kv.first.as<std::string>() << " not on the pod template";
  }
  const YAML::Node pod_spec = need(pod, "spec", YAML::NodeType::Map, "template");
  const YAML::Node containers = need(pod_spec, "containers", YAML::NodeType::Sequence, "pod");
  ASSERT_EQ(containers.size(), 1u);
  const YAML::Node c = containers[0];
  need(c, "image", YAML::NodeType::Scalar, "container");
  std::map<std::string, int> ports;  // name -> containerPort
  for (const YAML::Node& p : need(c, "ports", YAML::NodeType::Sequence, "container")) {
    ports[p["name"].as<std::string>()] = p["containerPort"].as<int>();
  }
  EXPECT_EQ(ports["http"], cfg.listeners.at(0).address.port);
  EXPECT_EQ(ports["admin"], cfg.admin.port);
  // The admin port (metrics, config, exchanges, POST /drain) stays inside the
  // pod: the probes exec `sluice --health-check` there (README "Security").
  EXPECT_EQ(cfg.admin.host, "127.0.0.1") << "admin is not exposed by default";
  EXPECT_EQ(cfg.listeners.at(0).address.host, "0.0.0.0");
  const auto probe = [&](const std::string& name, const std::string& path) {
    const YAML::Node exec =
        need(need(c, name, YAML::NodeType::Map, "container"), "exec", YAML::NodeType::Map, name);
    EXPECT_EQ(exec["command"].as<std::vector<std::string>>(std::vector<std::string>{}),
              (std::vector<std::string>{"sluice", "--health-check",
                                        "http://" + cfg.admin.toString() + path}))
        << name << " must probe the admin port";
  };
  probe("readinessProbe", "/ready");
  probe("livenessProbe", "/healthz");
  const YAML::Node pre_stop = need(need(need(c, "lifecycle", YAML::NodeType::Map, "container"),
                                        "preStop", YAML::NodeType::Map, "lifecycle"),
                                   "exec", YAML::NodeType::Map, "preStop");
  const YAML::Node command = need(pre_stop, "command", YAML::NodeType::Sequence, "preStop.exec");
  ASSERT_EQ(command.size(), 2u);
  EXPECT_EQ(command[0].as<std::string>(), "sleep");
  const int pre_stop_seconds = command[1].as<int>();
  const int grace = pod_spec["terminationGracePeriodSeconds"].as<int>(30);
  EXPECT_GT(grace, pre_stop_seconds + cfg.drain_timeout.count() / 1000)
      << "the pod must be allowed preStop + drain_timeout before SIGKILL";

  // The config comes from the ConfigMap, mounted where the container reads it.
  const auto args =
      need(c, "args", YAML::NodeType::Sequence, "container").as<std::vector<std::string>>();
  const auto flag = std::find(args.begin(), args.end(), "--config");
  ASSERT_TRUE(flag != args.end() && flag + 1 != args.end());
  EXPECT_EQ(flag[1], "/etc/sluice/" + config_map["data"].begin()->first.as<std::string>());
  const YAML::Node mounts = need(c, "volumeMounts", YAML::NodeType::Sequence, "container");
  ASSERT_EQ(mounts.size(), 1u);
  EXPECT_EQ(mounts[0]["mountPath"].as<std::string>(), "/etc/sluice");
  const YAML::Node volumes = need(pod_spec, "volumes", YAML::NodeType::Sequence, "pod");
  ASSERT_EQ(volumes.size(), 1u);
  EXPECT_EQ(volumes[0]["name"].as<std::string>(), mounts[0]["name"].as<std::string>());
  EXPECT_EQ(volumes[0]["configMap"]["name"].as<std::string>(),
            config_map["metadata"]["name"].as<std::string>());

  // The Service selects the pods and targets the proxy port.
  const YAML::Node service_spec = need(service, "spec", YAML::NodeType::Map, "Service");
  for (const auto& kv : need(service_spec, "selector", YAML::NodeType::Map, "Service.spec")) {
    EXPECT_EQ(labels[kv.first.as<std::string>()].as<std::string>(""), kv.second.as<std::string>());
  }
  const YAML::Node service_ports = need(service_spec, "ports", YAML::NodeType::Sequence, "spec");
  ASSERT_EQ(service_ports.size(), 1u);
  EXPECT_EQ(service_ports[0]["targetPort"].as<std::string>(), "http");

  // Several replicas share state through the manifest's own Redis (each pod
  // spending the whole quota alone gets the provider's 429s at N times the rate).
  const int replicas = spec["replicas"].as<int>(1);
  if (replicas > 1) {
    ASSERT_TRUE(cfg.shared_state.has_value()) << replicas << " replicas need shared_state";
    const YAML::Node redis_service = by_name["Service/" + cfg.shared_state->redis.host];
    ASSERT_TRUE(redis_service) << "no Service named " << cfg.shared_state->redis.host;
    const YAML::Node redis = by_name["Deployment/sluice-redis"];
    ASSERT_TRUE(redis);
    const YAML::Node redis_labels = redis["spec"]["template"]["metadata"]["labels"];
    for (const auto& kv : redis_service["spec"]["selector"]) {
      EXPECT_EQ(redis_labels[kv.first.as<std::string>()].as<std::string>(""),
                kv.second.as<std::string>());
    }
    EXPECT_EQ(redis_service["spec"]["ports"][0]["port"].as<int>(), cfg.shared_state->redis.port);
    EXPECT_EQ(
        redis["spec"]["template"]["spec"]["containers"][0]["ports"][0]["containerPort"].as<int>(),
        cfg.shared_state->redis.port);
  }
  // The NetworkPolicy admits the proxy port, and the admin port only from monitoring.
  const YAML::Node policy = by_name["NetworkPolicy/sluice"];
  ASSERT_TRUE(policy);
  std::set<int> open_to_all;
  for (const YAML::Node& rule : policy["spec"]["ingress"]) {
    for (const YAML::Node& p : rule["ports"]) {
      if (!rule["from"]) open_to_all.insert(p["port"].as<int>());
    }
  }
  EXPECT_EQ(open_to_all, (std::set<int>{ports["http"]}));
}

// --- the image and docker-compose --------------------------------------------

TEST(DeployTest, ImageDefaultConfigStartsWithoutMockAndTheHealthcheckProbesIt) {
  const std::string dockerfile = readSource("Dockerfile");
  EXPECT_NE(dockerfile.find("COPY config/examples/container.yaml /etc/sluice/sluice.yaml"),
            std::string::npos);
  EXPECT_NE(dockerfile.find(R"(CMD ["sluice", "--health-check", "http://127.0.0.1:9901/ready"])"),
            std::string::npos);
  const config::LoadResult loaded = config::loadConfigFile(
      sourceDir() + "/config/examples/container.yaml", [](const std::string&) {
        return std::nullopt;  // needs no environment variable
      });
  ASSERT_TRUE(loaded.ok()) << loaded.error->toString();
  EXPECT_EQ(loaded.config->listeners.at(0).address.host, "0.0.0.0");
  EXPECT_EQ(loaded.config->admin.toString(), "127.0.0.1:9901")
      << "where the HEALTHCHECK probes, and not exposed by default";
}

TEST(DeployTest, ComposeStartsServicesOnlyOnceTheirDependenciesAreHealthy) {
  const YAML::Node compose = YAML::Load(readSource("docker-compose.yml"));
  const YAML::Node services = compose["services"];
  ASSERT_TRUE(services.IsMap());
  size_t gated = 0;
  for (const auto& entry : services) {
    const std::string name = entry.first.as<std::string>();
    const YAML::Node depends = entry.second["depends_on"];
    if (!depends) continue;
    ASSERT_TRUE(depends.IsMap()) << name << ": depends_on must name conditions";
    for (const auto& dep : depends) {
      const std::string on = dep.first.as<std::string>();
      EXPECT_EQ(dep.second["condition"].as<std::string>(""), "service_healthy")
          << name << " -> " << on;
      EXPECT_TRUE(services[on]["healthcheck"].IsMap()) << on << " needs a healthcheck";
      ++gated;
    }
  }
  EXPECT_EQ(gated, 9u) << "sluice and sluice-2 after mock-llm and redis, haproxy and prometheus "
                          "after both replicas, grafana after prometheus";

  // The compose config listens on all interfaces and lets Prometheus (Host: sluice) scrape.
  const config::LoadResult loaded =
      config::loadConfigFile(sourceDir() + "/dashboards/compose-sluice.yaml");
  ASSERT_TRUE(loaded.ok()) << loaded.error->toString();
  EXPECT_EQ(loaded.config->admin.host, "0.0.0.0");
  EXPECT_EQ(loaded.config->admin_allowed_hosts, (std::vector<std::string>{"sluice", "sluice-2"}));
  ASSERT_TRUE(loaded.config->shared_state.has_value()) << "the replicas share state";
  EXPECT_EQ(loaded.config->shared_state->redis.host, "redis");

  if (!haveCommand("docker-compose")) GTEST_SKIP() << "docker-compose not installed";
  auto [code, out] = runCommand("cd " + sourceDir() + " && docker-compose config -q");
  EXPECT_EQ(code, 0) << out;
}

}  // namespace
}  // namespace sluice::test
