package k8s_test

// These tests render every kustomization under deploy/k8s with the kustomize
// Go API, decode each object strictly into the typed Kubernetes API structs,
// and check that the manifests agree with the silo they run: its flags, its
// ports, its HTTP endpoints, its shutdown timeout.

import (
	"fmt"
	"go/ast"
	"go/parser"
	"go/token"
	"io/fs"
	"net"
	"net/url"
	"os"
	"os/exec"
	"path/filepath"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"
	"time"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	networkingv1 "k8s.io/api/networking/v1"
	policyv1 "k8s.io/api/policy/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
	kjson "sigs.k8s.io/json"
	"sigs.k8s.io/kustomize/api/krusty"
	"sigs.k8s.io/kustomize/kyaml/filesys"
	"sigs.k8s.io/yaml"
)

// variant is what one kustomization is expected to deploy.
type variant struct {
	// etcd: the rendering holds the etcd StatefulSet the silos point at;
	// otherwise the silos point at an etcd outside the rendering.
	etcd bool
	// tls: the gateway serves TLS (--tls-*), so readiness uses /readyz.
	tls bool
	// external names Secrets and ConfigMaps the user creates beside the
	// rendering (documented in the kustomization that needs them).
	external []string
}

// variants lists every kustomization under this directory (TestEveryKustomizationIsChecked).
var variants = map[string]variant{
	"base":                   {etcd: true},
	"overlays/external-etcd": {external: []string{"silo-etcd-client"}},
	"overlays/tls":           {etcd: true, tls: true, external: []string{"silo-tls"}},
}

// siloFlags are the silo's flags with their defaults, read from the -help
// output of the real program.
type siloFlags map[string]string

func readSiloFlags(t *testing.T) siloFlags {
	t.Helper()
	bin := buildRoot(t, "./cmd/silo")
	// -help exits 0 today; a non-zero exit is fine as long as it lists the
	// flags, which is checked below.
	out, helpErr := exec.Command(bin, "-help").CombinedOutput()
	// flag.PrintDefaults: "  -name type" (or "  -name" for a bool), then
	// the usage on the following lines, ending in "(default V)" when the
	// default is not the zero value.
	flagLine := regexp.MustCompile(`^  -([A-Za-z0-9][A-Za-z0-9-]*)(?:\s|$)`)
	deflt := regexp.MustCompile(`\(default "?([^")]*)"?\)\s*$`)
	flags := siloFlags{}
	cur := ""
	for line := range strings.Lines(string(out)) {
		line = strings.TrimRight(line, "\n")
		if m := flagLine.FindStringSubmatch(line); m != nil {
			cur = m[1]
			flags[cur] = ""
		}
		if m := deflt.FindStringSubmatch(line); m != nil && cur != "" {
			flags[cur] = m[1]
		}
	}
	for _, want := range []string{"name", "gateway-addr", "http-addr", "shutdown-timeout"} {
		if _, ok := flags[want]; !ok {
			t.Fatalf("silo -help (exit: %v) lists no -%s: the help format changed?\n%s", helpErr, want, out)
		}
	}
	return flags
}

// repoRoot is the agentsilo repository, whose root module holds the silo.
// This directory is a module of its own (so that Kubernetes stays out of
// the root module's requirements), and it imports nothing of the root
// module: it builds the root module's programs with the go command, run
// from the root.
const repoRoot = "../.."

// buildRoot builds the main package pkg of the root module (such as
// ./cmd/silo) and returns the binary's path.
func buildRoot(t *testing.T, pkg string) string {
	t.Helper()
	root, err := filepath.Abs(repoRoot)
	if err != nil {
		t.Fatal(err)
	}
	bin := filepath.Join(t.TempDir(), filepath.Base(pkg))
	cmd := exec.Command("go", "build", "-o", bin, pkg)
	cmd.Dir = root
	if out, err := cmd.CombinedOutput(); err != nil {
		t.Fatalf("go build %s (in %s): %v\n%s", pkg, root, err, out)
	}
	return bin
}

// httpPaths returns the HTTP paths the silo serves: the patterns given to
// Handle and HandleFunc anywhere in the root module's non-test code.
func httpPaths(t *testing.T) []string {
	t.Helper()
	var paths []string
	err := filepath.WalkDir(repoRoot, func(path string, d fs.DirEntry, err error) error {
		if err != nil {
			return err
		}
		if d.IsDir() && (strings.HasPrefix(d.Name(), ".") && path != repoRoot || d.Name() == "testdata" || d.Name() == "data") {
			return filepath.SkipDir
		}
		if d.IsDir() || !strings.HasSuffix(path, ".go") || strings.HasSuffix(path, "_test.go") {
			return nil
		}
		f, err := parser.ParseFile(token.NewFileSet(), path, nil, parser.SkipObjectResolution)
		if err != nil {
			return err
		}
		ast.Inspect(f, func(n ast.Node) bool {
			call, ok := n.(*ast.CallExpr)
			if !ok || len(call.Args) == 0 {
				return true
			}
			sel, ok := call.Fun.(*ast.SelectorExpr)
			if !ok || sel.Sel.Name != "Handle" && sel.Sel.Name != "HandleFunc" {
				return true
			}
			lit, ok := call.Args[0].(*ast.BasicLit)
			if !ok || lit.Kind != token.STRING {
				return true
			}
			pattern, err := strconv.Unquote(lit.Value)
			if err != nil {
				return true
			}
			// "GET /healthz" -> "/healthz"
			if _, p, ok := strings.Cut(pattern, " "); ok {
				pattern = p
			}
			paths = append(paths, pattern)
			return true
		})
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
	if !slices.Contains(paths, "/healthz") {
		t.Fatalf("found no handler for /healthz in the root module (found %v)", paths)
	}
	return paths
}

// objects is one rendering, decoded.
type objects struct {
	statefulSets map[string]*appsv1.StatefulSet
	services     map[string]*corev1.Service
	pdbs         map[string]*policyv1.PodDisruptionBudget
	netpols      map[string]*networkingv1.NetworkPolicy
	configMaps   map[string]*corev1.ConfigMap
	secrets      map[string]*corev1.Secret
}

// render builds the kustomization in dir and decodes every object strictly
// (unknown or duplicate fields, or a kind outside this list, fail).
func render(t *testing.T, dir string) *objects {
	t.Helper()
	k := krusty.MakeKustomizer(krusty.MakeDefaultOptions())
	rm, err := k.Run(filesys.MakeFsOnDisk(), dir)
	if err != nil {
		t.Fatalf("kustomize build %s: %v", dir, err)
	}
	o := &objects{
		statefulSets: map[string]*appsv1.StatefulSet{},
		services:     map[string]*corev1.Service{},
		pdbs:         map[string]*policyv1.PodDisruptionBudget{},
		netpols:      map[string]*networkingv1.NetworkPolicy{},
		configMaps:   map[string]*corev1.ConfigMap{},
		secrets:      map[string]*corev1.Secret{},
	}
	for _, r := range rm.Resources() {
		data, err := r.MarshalJSON()
		if err != nil {
			t.Fatalf("%s: %v", r.CurId(), err)
		}
		gvk := r.GetGvk()
		key := gvk.ApiVersion() + " " + gvk.Kind
		name := r.GetName()
		var obj any
		switch key {
		case "apps/v1 StatefulSet":
			v := &appsv1.StatefulSet{}
			o.statefulSets[name], obj = v, v
		case "v1 Service":
			v := &corev1.Service{}
			o.services[name], obj = v, v
		case "policy/v1 PodDisruptionBudget":
			v := &policyv1.PodDisruptionBudget{}
			o.pdbs[name], obj = v, v
		case "networking.k8s.io/v1 NetworkPolicy":
			v := &networkingv1.NetworkPolicy{}
			o.netpols[name], obj = v, v
		case "v1 ConfigMap":
			v := &corev1.ConfigMap{}
			o.configMaps[name], obj = v, v
		case "v1 Secret":
			v := &corev1.Secret{}
			o.secrets[name], obj = v, v
		default:
			t.Errorf("%s: %s %s is not a kind this test knows; teach it the kind and its checks", dir, key, name)
			continue
		}
		strict, err := kjson.UnmarshalStrict(data, obj, kjson.DisallowDuplicateFields, kjson.DisallowUnknownFields)
		if err != nil {
			t.Fatalf("%s: %s %s: %v", dir, key, name, err)
		}
		for _, e := range strict {
			t.Errorf("%s: %s %s: %v", dir, key, name, e)
		}
		if errs := validation.IsDNS1123Subdomain(name); len(errs) > 0 {
			t.Errorf("%s: %s name %q: %v", dir, key, name, errs)
		}
	}
	return o
}

// TestEveryKustomizationIsChecked: each kustomization under this directory
// is in variants, so none goes unrendered.
func TestEveryKustomizationIsChecked(t *testing.T) {
	err := filepath.WalkDir(".", func(path string, d fs.DirEntry, err error) error {
		if err != nil || d.IsDir() || d.Name() != "kustomization.yaml" {
			return err
		}
		data, err := os.ReadFile(path)
		if err != nil {
			return err
		}
		var head struct{ Kind string }
		if err := yaml.Unmarshal(data, &head); err != nil {
			return fmt.Errorf("%s: %v", path, err)
		}
		dir := filepath.ToSlash(filepath.Dir(path))
		switch head.Kind {
		case "Kustomization":
			if _, ok := variants[dir]; !ok {
				t.Errorf("%s is not in variants: add it with what it should deploy", dir)
			}
		case "Component":
			used := false
			for v := range variants {
				k, err := os.ReadFile(filepath.Join(v, "kustomization.yaml"))
				if err != nil {
					return err
				}
				var kust struct{ Components []string }
				if err := yaml.Unmarshal(k, &kust); err != nil {
					return err
				}
				for _, c := range kust.Components {
					used = used || filepath.Clean(filepath.Join(v, c)) == filepath.Clean(dir)
				}
			}
			if !used {
				t.Errorf("component %s is used by none of the checked kustomizations", dir)
			}
		default:
			t.Errorf("%s: kind %q", path, head.Kind)
		}
		return nil
	})
	if err != nil {
		t.Fatal(err)
	}
}

func TestKustomizations(t *testing.T) {
	flags := readSiloFlags(t)
	paths := httpPaths(t)
	// A copy of this directory with a key file, as make-keys.sh writes it
	// (the repository has none: TestKeysMustBeMade).
	tr := newTree(t, "alice", "ops:admins")
	for dir, want := range variants {
		t.Run(dir, func(t *testing.T) {
			o := render(t, filepath.Join(tr.dir, dir))
			checkKeySecret(t, o, tr.keyFile)
			checkSilo(t, o, want, flags, paths)
			checkSelectors(t, o)
			checkServicePorts(t, o)
			checkSiloNetworkPolicy(t, o)
			for _, s := range o.statefulSets {
				checkPod(t, s, o, want)
			}
			if want.etcd {
				checkEtcd(t, o)
			} else if _, ok := o.statefulSets["etcd"]; ok {
				t.Errorf("a StatefulSet etcd is rendered, but this variant uses an external etcd")
			}
		})
	}
}

// siloArgs are the silo container's flags, with $(VAR) references resolved.
type siloArgs map[string]string

func (a siloArgs) port(t *testing.T, flag string) int32 {
	t.Helper()
	_, p, err := net.SplitHostPort(a[flag])
	if err != nil {
		t.Fatalf("--%s=%s: %v", flag, a[flag], err)
	}
	n, err := strconv.ParseInt(p, 10, 32)
	if err != nil {
		t.Fatalf("--%s=%s: port: %v", flag, a[flag], err)
	}
	return int32(n)
}

// parseArgs reads --flag=value arguments, checks each against the silo's
// flags, and resolves $(VAR) against the container's environment as the
// kubelet does (a downward-API variable becomes <VAR>).
func parseArgs(t *testing.T, c *corev1.Container, flags siloFlags) siloArgs {
	t.Helper()
	env := map[string]string{}
	for _, e := range c.Env {
		switch {
		case e.ValueFrom != nil:
			env[e.Name] = "<" + e.Name + ">"
		default:
			env[e.Name] = e.Value
		}
	}
	ref := regexp.MustCompile(`\$\(([A-Za-z_][A-Za-z0-9_]*)\)`)
	args := siloArgs{}
	for _, a := range c.Args {
		name, value, hasValue := strings.Cut(strings.TrimPrefix(a, "--"), "=")
		if !strings.HasPrefix(a, "--") || name == "" {
			t.Errorf("silo argument %q: want --flag=value", a)
			continue
		}
		if _, ok := flags[name]; !ok {
			t.Errorf("silo argument %q: the silo has no flag --%s", a, name)
		}
		if _, dup := args[name]; dup {
			t.Errorf("silo flag --%s given twice", name)
		}
		if !hasValue {
			value = "true"
		}
		value = ref.ReplaceAllStringFunc(value, func(s string) string {
			v := ref.FindStringSubmatch(s)[1]
			val, ok := env[v]
			if !ok {
				t.Errorf("silo argument %q: $(%s) is not in the container's environment, so the kubelet would pass it literally", a, v)
			}
			return val
		})
		args[name] = value
	}
	return args
}

// containerPort finds the port a probe or Service names (by name or
// number) among c's ports.
func containerPort(c *corev1.Container, p intstr.IntOrString, proto corev1.Protocol) (corev1.ContainerPort, bool) {
	for _, cp := range c.Ports {
		pp := cp.Protocol
		if pp == "" {
			pp = corev1.ProtocolTCP
		}
		if pp != proto {
			continue
		}
		if p.Type == intstr.String && cp.Name == p.StrVal || p.Type == intstr.Int && cp.ContainerPort == p.IntVal {
			return cp, true
		}
	}
	return corev1.ContainerPort{}, false
}

func container(t *testing.T, s *appsv1.StatefulSet, name string) *corev1.Container {
	t.Helper()
	for i := range s.Spec.Template.Spec.Containers {
		if c := &s.Spec.Template.Spec.Containers[i]; c.Name == name {
			return c
		}
	}
	t.Fatalf("StatefulSet %s has no container %s", s.Name, name)
	return nil
}

func envVar(c *corev1.Container, name string) (corev1.EnvVar, bool) {
	for _, e := range c.Env {
		if e.Name == name {
			return e, true
		}
	}
	return corev1.EnvVar{}, false
}

func checkSilo(t *testing.T, o *objects, want variant, flags siloFlags, paths []string) {
	s, ok := o.statefulSets["silo"]
	if !ok {
		t.Fatal("no StatefulSet silo")
	}
	if s.Spec.Replicas == nil || *s.Spec.Replicas != 3 {
		t.Errorf("silo replicas = %v, want 3", s.Spec.Replicas)
	}
	if len(s.Spec.VolumeClaimTemplates) > 0 {
		t.Errorf("silo has volumeClaimTemplates, but a silo keeps no state of its own (etcd does)")
	}
	pod := &s.Spec.Template.Spec
	if pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("silo pods must set enableServiceLinks: false: service links add SILO_* variables, and the silo reads its flags from SILO_* variables")
	}
	c := container(t, s, "silo")
	args := parseArgs(t, c, flags)

	// Identity from the downward API.
	fieldFrom := func(flag, env, field string) {
		if args[flag] != "<"+env+">" {
			t.Errorf("--%s=%q, want $(%s)", flag, args[flag], env)
			return
		}
		e, _ := envVar(c, env)
		if e.ValueFrom == nil || e.ValueFrom.FieldRef == nil || e.ValueFrom.FieldRef.FieldPath != field {
			t.Errorf("env %s does not come from the downward API's %s", env, field)
		}
	}
	fieldFrom("name", "POD_NAME", "metadata.name")
	fieldFrom("advertise-addr", "POD_IP", "status.podIP")

	// Listen addresses: all interfaces, each port declared once under its
	// name, and no declared port without a listener.
	listeners := []struct {
		flag, port string
		protos     []corev1.Protocol
	}{
		{"gateway-addr", "gateway", []corev1.Protocol{corev1.ProtocolTCP}},
		{"peer-addr", "peer", []corev1.Protocol{corev1.ProtocolTCP}},
		{"gossip-addr", "gossip", []corev1.Protocol{corev1.ProtocolTCP, corev1.ProtocolUDP}},
		{"http-addr", "http", []corev1.Protocol{corev1.ProtocolTCP}},
	}
	declared := map[string]bool{}
	for _, l := range listeners {
		if _, ok := args[l.flag]; !ok {
			t.Errorf("no --%s: its default listens on loopback only", l.flag)
			continue
		}
		if host, _, _ := net.SplitHostPort(args[l.flag]); host != "0.0.0.0" && host != "" && host != "::" {
			t.Errorf("--%s=%s: want all interfaces (0.0.0.0)", l.flag, args[l.flag])
		}
		port := args.port(t, l.flag)
		for _, proto := range l.protos {
			cp, ok := containerPort(c, intstr.FromInt32(port), proto)
			if !ok {
				t.Errorf("--%s=%s: no %s containerPort %d", l.flag, args[l.flag], proto, port)
				continue
			}
			declared[cp.Name] = true
			if proto == corev1.ProtocolTCP && cp.Name != l.port {
				t.Errorf("containerPort %d is named %q, want %q", port, cp.Name, l.port)
			}
		}
	}
	for _, cp := range c.Ports {
		if !declared[cp.Name] {
			t.Errorf("containerPort %s (%d) has no silo listener", cp.Name, cp.ContainerPort)
		}
	}
	gatewayPort, httpPort := args.port(t, "gateway-addr"), args.port(t, "http-addr")

	// The dashboard for client certificates: with TLS on the gateway (it
	// needs --tls-cert), on the pod's loopback, for kubectl port-forward
	// (docs/operations.md): no other pod reaches it, so it has no
	// containerPort, and its port is none of the listeners'.
	if da, ok := args["dashboard-addr"]; ok != want.tls {
		t.Errorf("--dashboard-addr given: %v, want %v (with TLS on the gateway only)", ok, want.tls)
	} else if ok {
		host, _, err := net.SplitHostPort(da)
		if ip := net.ParseIP(host); err != nil || ip == nil || !ip.IsLoopback() {
			t.Errorf("--dashboard-addr=%s: want a loopback address, reached by kubectl port-forward", da)
		}
		dp := args.port(t, "dashboard-addr")
		for _, l := range listeners {
			if _, ok := args[l.flag]; ok && args.port(t, l.flag) == dp {
				t.Errorf("--dashboard-addr=%s: port taken by --%s", da, l.flag)
			}
		}
		if _, ok := containerPort(c, intstr.FromInt32(dp), corev1.ProtocolTCP); ok {
			t.Errorf("--dashboard-addr=%s: a containerPort %d declares a port no other pod can reach", da, dp)
		}
	}

	// --join: a headless Service over the silos that publishes not-ready
	// pods, governing the StatefulSet, on the gossip port.
	joinHost, joinPort, err := net.SplitHostPort(args["join"])
	if err != nil {
		t.Errorf("--join=%q: want service:port: %v", args["join"], err)
	} else {
		svcName, _, _ := strings.Cut(joinHost, ".")
		svc, ok := o.services[svcName]
		switch {
		case !ok:
			t.Errorf("--join=%s: no Service %s", args["join"], svcName)
		case svc.Spec.ClusterIP != corev1.ClusterIPNone:
			t.Errorf("--join Service %s is not headless: its name would resolve to one virtual IP, not to every silo", svcName)
		case !svc.Spec.PublishNotReadyAddresses:
			t.Errorf("--join Service %s does not publish not-ready addresses: a starting silo (not ready until it has joined) could find no seeds", svcName)
		case !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)):
			t.Errorf("--join Service %s does not select the silo pods", svcName)
		}
		if s.Spec.ServiceName != svcName {
			t.Errorf("silo serviceName = %q, want the --join Service %q", s.Spec.ServiceName, svcName)
		}
		if joinPort != strconv.Itoa(int(args.port(t, "gossip-addr"))) {
			t.Errorf("--join port %s is not the gossip port of --gossip-addr=%s", joinPort, args["gossip-addr"])
		}
	}

	// etcd: always an external one (never the embedded etcd, whose data
	// would sit on a read-only root filesystem).
	if _, ok := args["data-dir"]; ok {
		t.Errorf("--data-dir is given, but only an embedded etcd uses it")
	}
	endpoints := strings.Split(args["etcd-endpoints"], ",")
	if args["etcd-endpoints"] == "" {
		t.Errorf("no --etcd-endpoints: the silo would run an embedded etcd")
		endpoints = nil
	}
	for _, ep := range endpoints {
		u, err := url.Parse(ep)
		if err != nil || u.Host == "" || u.Port() == "" {
			t.Errorf("--etcd-endpoints: %q is not scheme://host:port", ep)
			continue
		}
		if u.Scheme != "https" {
			t.Errorf("--etcd-endpoints: %s is not https: the silos speak TLS to etcd", ep)
		}
		if want.etcd {
			checkEtcdEndpoint(t, o, u)
		} else if sts, _, _ := strings.Cut(u.Hostname(), "-"); o.statefulSets[sts] != nil {
			t.Errorf("--etcd-endpoints: %s names a StatefulSet of this rendering, but this variant uses an external etcd", ep)
		}
	}
	if p := args["etcd-prefix"]; p != "" && !strings.HasSuffix(p, "/") {
		t.Errorf("--etcd-prefix=%s: end it with /", p)
	}

	// Probes: readiness from the gateway's gRPC health service (it turns
	// SERVING once the silo is in the view), or /readyz where the gateway
	// speaks TLS; liveness and startup from /healthz.
	probe := func(what string, p *corev1.Probe) *corev1.ProbeHandler {
		if p == nil {
			t.Errorf("silo has no %s probe", what)
			return nil
		}
		n := 0
		for _, set := range []bool{p.Exec != nil, p.HTTPGet != nil, p.TCPSocket != nil, p.GRPC != nil} {
			if set {
				n++
			}
		}
		if n != 1 {
			t.Errorf("silo %s probe has %d handlers, want 1", what, n)
		}
		if p.HTTPGet != nil {
			if _, ok := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); !ok {
				t.Errorf("silo %s probe: port %s is not a containerPort", what, p.HTTPGet.Port.String())
			}
			if cp, _ := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); cp.ContainerPort != httpPort {
				t.Errorf("silo %s probe: port %s is not --http-addr's", what, p.HTTPGet.Port.String())
			}
			if !slices.Contains(paths, p.HTTPGet.Path) {
				t.Errorf("silo %s probe: the silo serves no %s (it serves %v)", what, p.HTTPGet.Path, paths)
			}
		}
		return &p.ProbeHandler
	}
	if h := probe("readiness", c.ReadinessProbe); h != nil {
		switch {
		case want.tls:
			if h.HTTPGet == nil || h.HTTPGet.Path != "/readyz" {
				t.Errorf("silo readiness: with TLS on the gateway, want httpGet /readyz (the kubelet's gRPC probe has no TLS)")
			}
		case h.GRPC == nil:
			t.Errorf("silo readiness: want the gRPC health probe on the gateway port")
		case h.GRPC.Port != gatewayPort:
			t.Errorf("silo readiness: gRPC probe on port %d, gateway on %d", h.GRPC.Port, gatewayPort)
		case h.GRPC.Service != nil && *h.GRPC.Service != "" && *h.GRPC.Service != "agentsilo.v1.Gateway":
			t.Errorf("silo readiness: gRPC service %q is not one the gateway reports", *h.GRPC.Service)
		}
	}
	if h := probe("liveness", c.LivenessProbe); h != nil && (h.HTTPGet == nil || h.HTTPGet.Path != "/healthz") {
		t.Errorf("silo liveness: want httpGet /healthz")
	}
	if c.StartupProbe != nil {
		if h := probe("startup", c.StartupProbe); h != nil && (h.HTTPGet == nil || h.HTTPGet.Path != "/healthz") {
			t.Errorf("silo startup: want httpGet /healthz")
		}
	}

	// Shutdown: the grace period covers the preStop hook and the silo's own
	// --shutdown-timeout, with room to spare.
	shutdown := args["shutdown-timeout"]
	if shutdown == "" {
		shutdown = flags["shutdown-timeout"]
	}
	d, err := time.ParseDuration(shutdown)
	if err != nil {
		t.Fatalf("--shutdown-timeout=%q: %v", shutdown, err)
	}
	var preStop time.Duration
	if c.Lifecycle == nil || c.Lifecycle.PreStop == nil {
		t.Errorf("silo has no preStop hook: SIGTERM could arrive before the pod leaves the gateway Service")
	} else if sl := c.Lifecycle.PreStop.Sleep; sl != nil {
		preStop = time.Duration(sl.Seconds) * time.Second
	}
	if g := pod.TerminationGracePeriodSeconds; g == nil || time.Duration(*g)*time.Second <= preStop+d {
		t.Errorf("terminationGracePeriodSeconds is not above preStop %v + --shutdown-timeout %v", preStop, d)
	}

	// Files: each lies in a mounted volume, under a key that the ConfigMap
	// or Secret has; the ACL seed and the key file parse; the silos' own
	// credentials (peer TLS, gossip key, etcd client) are always there.
	files := map[string][]byte{}
	for _, flag := range []string{"acl-file", "auth-file", "tls-cert", "tls-key", "tls-client-ca",
		"peer-tls-cert", "peer-tls-key", "peer-tls-ca", "gossip-key-file", "etcd-ca", "etcd-cert", "etcd-key"} {
		path, ok := args[flag]
		if wantFlag := !strings.HasPrefix(flag, "tls-") || want.tls; ok != wantFlag {
			t.Errorf("--%s given: %v, want %v", flag, ok, wantFlag)
		}
		if !ok {
			continue
		}
		data, ok := mountedFile(t, s, c, o, want, path)
		if ok {
			files[flag] = data
		}
		switch {
		case !ok:
		case flag == "acl-file":
			checkACL(t, data)
		case flag == "auth-file":
			checkKeys(t, data)
		}
	}
	if _, ok := args["insecure"]; ok {
		t.Errorf("--insecure is set: the gateway would accept self-declared principals, and the peer and gossip ports anyone")
	}
	checkSiloCredentials(t, args, files)
	if want.etcd {
		checkEtcdTLS(t, o, args, files)
	}

	// GOMEMLIMIT below the memory limit.
	if e, ok := envVar(c, "GOMEMLIMIT"); ok {
		soft, err := parseGoBytes(e.Value)
		lim := c.Resources.Limits.Memory()
		if err != nil {
			t.Errorf("GOMEMLIMIT=%q: %v", e.Value, err)
		} else if lim.IsZero() || soft >= lim.Value() {
			t.Errorf("GOMEMLIMIT=%s is not below the memory limit %s", e.Value, lim)
		}
	}

	// The gateway Service: a ClusterIP Service on the gateway port.
	found := false
	for _, svc := range o.services {
		if svc.Spec.ClusterIP == corev1.ClusterIPNone || !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
			continue
		}
		for _, sp := range svc.Spec.Ports {
			if cp, ok := containerPort(c, sp.TargetPort, corev1.ProtocolTCP); ok && cp.ContainerPort == gatewayPort {
				found = true
			}
		}
	}
	if !found {
		t.Errorf("no ClusterIP Service selects the silos on the gateway port %d", gatewayPort)
	}

	// At most one silo down for a voluntary disruption.
	found = false
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
			continue
		}
		found = true
		if pdb.Spec.MaxUnavailable == nil || pdb.Spec.MaxUnavailable.String() != "1" || pdb.Spec.MinAvailable != nil {
			t.Errorf("PodDisruptionBudget %s: want maxUnavailable 1 only", pdb.Name)
		}
	}
	if !found {
		t.Errorf("no PodDisruptionBudget covers the silos")
	}
}
