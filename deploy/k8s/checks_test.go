package k8s_test

import (
	"bytes"
	"crypto/sha256"
	"encoding/hex"
	"encoding/json"
	"fmt"
	"net/url"
	"regexp"
	"slices"
	"strconv"
	"strings"
	"testing"

	appsv1 "k8s.io/api/apps/v1"
	corev1 "k8s.io/api/core/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/labels"
	"k8s.io/apimachinery/pkg/util/intstr"
	"k8s.io/apimachinery/pkg/util/validation"
)

// mountedFile returns the content of the file at path in container c of s,
// from the ConfigMap or Secret mounted there; ok is false if it is not
// known (a missing file is reported, an external Secret is not).
func mountedFile(t *testing.T, s *appsv1.StatefulSet, c *corev1.Container, o *objects, want variant, path string) ([]byte, bool) {
	t.Helper()
	for _, m := range c.VolumeMounts {
		dir := strings.TrimSuffix(m.MountPath, "/") + "/"
		if !strings.HasPrefix(path, dir) || m.SubPath != "" {
			continue
		}
		key := strings.TrimPrefix(path, dir)
		for _, v := range s.Spec.Template.Spec.Volumes {
			if v.Name != m.Name {
				continue
			}
			switch {
			case v.ConfigMap != nil:
				if cm, ok := o.configMaps[v.ConfigMap.Name]; ok {
					if d, ok := cm.Data[key]; ok {
						return []byte(d), true
					}
					t.Errorf("%s: ConfigMap %s has no key %s", path, cm.Name, key)
				}
			case v.Secret != nil:
				if sec, ok := o.secrets[v.Secret.SecretName]; ok {
					if d, ok := sec.Data[key]; ok {
						return d, true
					}
					t.Errorf("%s: Secret %s has no key %s", path, sec.Name, key)
				} else if !slices.Contains(want.external, v.Secret.SecretName) {
					t.Errorf("%s: Secret %s is not rendered", path, v.Secret.SecretName)
				}
			default:
				t.Errorf("%s: volume %s is neither a ConfigMap nor a Secret", path, v.Name)
			}
			return nil, false
		}
	}
	t.Errorf("%s is in no mounted volume of container %s", path, c.Name)
	return nil, false
}

// checkACL: the ACL file's JSON (its Rules and Groups).
func checkACL(t *testing.T, data []byte) {
	t.Helper()
	var acl struct {
		Rules []struct {
			OwnerPattern, AgentPattern, CallerPattern, Permission string
		}
		Groups map[string][]string
	}
	if err := strictJSON(data, &acl); err != nil {
		t.Errorf("ACL seed: %v", err)
		return
	}
	if len(acl.Rules) == 0 {
		t.Errorf("ACL seed has no rules")
	}
	for i, r := range acl.Rules {
		if r.OwnerPattern == "" || r.AgentPattern == "" || r.CallerPattern == "" {
			t.Errorf("ACL seed rule %d: empty pattern: %+v", i, r)
		}
		for p := range strings.SplitSeq(r.Permission, ",") {
			if !slices.Contains([]string{"Message", "Configure", "Read", "Admin", "All"}, strings.TrimSpace(p)) {
				t.Errorf("ACL seed rule %d: permission %q: want Message, Configure, Read, Admin or All", i, p)
			}
		}
	}
}

// checkKeys: the API-key file.
func checkKeys(t *testing.T, data []byte) {
	t.Helper()
	var f struct {
		Keys []struct {
			SHA256    string   `json:"sha256"`
			Principal string   `json:"principal"`
			Groups    []string `json:"groups"`
		} `json:"keys"`
	}
	if err := strictJSON(data, &f); err != nil {
		t.Errorf("API-key file: %v", err)
		return
	}
	if len(f.Keys) == 0 {
		t.Errorf("API-key file has no keys: the silo refuses to start with it")
	}
	hex := regexp.MustCompile(`^[0-9a-f]{64}$`)
	for i, k := range f.Keys {
		if !hex.MatchString(k.SHA256) {
			t.Errorf("API key %d: sha256 %q is not 64 lower-case hex digits", i, k.SHA256)
		}
		if !validName.MatchString(k.Principal) {
			t.Errorf("API key %d: principal %q is not a valid name", i, k.Principal)
		}
		for _, g := range k.Groups {
			if !validName.MatchString(g) {
				t.Errorf("API key %d: group %q is not a valid name", i, g)
			}
		}
	}
}

// validName is what the silo accepts as a principal or group
// (grain.ValidName).
var validName = regexp.MustCompile(`^[A-Za-z0-9][A-Za-z0-9_.@-]{0,127}$`)

func strictJSON(data []byte, v any) error {
	d := json.NewDecoder(bytes.NewReader(data))
	d.DisallowUnknownFields()
	if err := d.Decode(v); err != nil {
		return err
	}
	if d.More() {
		return fmt.Errorf("more than one JSON value")
	}
	return nil
}

// parseGoBytes reads a GOMEMLIMIT value: bytes, optionally with B, KiB,
// MiB, GiB or TiB.
func parseGoBytes(s string) (int64, error) {
	for i, unit := range []string{"TiB", "GiB", "MiB", "KiB", "B"} {
		if n, ok := strings.CutSuffix(s, unit); ok {
			v, err := strconv.ParseInt(n, 10, 64)
			return v << (10 * (4 - i)), err
		}
	}
	return strconv.ParseInt(s, 10, 64)
}

// checkEtcdEndpoint: an endpoint of the rendered etcd names one of its
// members through the StatefulSet's headless Service, on its client port.
func checkEtcdEndpoint(t *testing.T, o *objects, u *url.URL) {
	t.Helper()
	parts := strings.Split(u.Hostname(), ".")
	member, svcName := parts[0], ""
	if len(parts) > 1 {
		svcName = parts[1]
	}
	i := strings.LastIndex(member, "-")
	if i < 0 {
		t.Errorf("etcd endpoint %s: want <statefulset>-<ordinal>.<service>", u)
		return
	}
	sts, ok := o.statefulSets[member[:i]]
	if !ok {
		t.Errorf("etcd endpoint %s: no StatefulSet %s", u, member[:i])
		return
	}
	if n, err := strconv.Atoi(member[i+1:]); err != nil || sts.Spec.Replicas == nil || n >= int(*sts.Spec.Replicas) {
		t.Errorf("etcd endpoint %s: %s is not a pod of StatefulSet %s", u, member, sts.Name)
	}
	if svcName != sts.Spec.ServiceName {
		t.Errorf("etcd endpoint %s: want the governing Service %s of StatefulSet %s", u, sts.Spec.ServiceName, sts.Name)
	}
	port, _ := strconv.ParseInt(u.Port(), 10, 32)
	if cp, ok := containerPort(&sts.Spec.Template.Spec.Containers[0], intstr.FromInt32(int32(port)), corev1.ProtocolTCP); !ok || cp.Name != "client" {
		t.Errorf("etcd endpoint %s: port %s is not the client port of %s", u, u.Port(), sts.Name)
	}
}

// checkEtcd: the rendered etcd cluster is consistent with itself.
func checkEtcd(t *testing.T, o *objects) {
	t.Helper()
	sts, ok := o.statefulSets["etcd"]
	if !ok {
		t.Fatal("no StatefulSet etcd")
	}
	if sts.Spec.Replicas == nil || *sts.Spec.Replicas != 3 {
		t.Errorf("etcd replicas = %v, want 3", sts.Spec.Replicas)
	}
	if sts.Spec.PodManagementPolicy != appsv1.ParallelPodManagement {
		t.Errorf("etcd podManagementPolicy = %q: with OrderedReady the first member waits forever for a quorum", sts.Spec.PodManagementPolicy)
	}
	if pod := sts.Spec.Template.Spec; pod.EnableServiceLinks == nil || *pod.EnableServiceLinks {
		t.Errorf("etcd pods must set enableServiceLinks: false: etcd reads ETCD_* variables as flags")
	}
	svc, ok := o.services[sts.Spec.ServiceName]
	if !ok || svc.Spec.ClusterIP != corev1.ClusterIPNone || !svc.Spec.PublishNotReadyAddresses {
		t.Errorf("etcd's governing Service %q must exist, be headless and publish not-ready addresses", sts.Spec.ServiceName)
	}
	c := container(t, sts, "etcd")
	var cluster []string
	for _, a := range c.Args {
		if v, ok := strings.CutPrefix(a, "--initial-cluster="); ok {
			cluster = strings.Split(v, ",")
		}
	}
	if sts.Spec.Replicas != nil && len(cluster) != int(*sts.Spec.Replicas) {
		t.Errorf("etcd --initial-cluster has %d members, replicas %v", len(cluster), *sts.Spec.Replicas)
	}
	for i, m := range cluster {
		name := fmt.Sprintf("%s-%d", sts.Name, i)
		if want := fmt.Sprintf("%s=https://%s.%s:", name, name, sts.Spec.ServiceName); !strings.HasPrefix(m, want) {
			t.Errorf("etcd --initial-cluster member %q: want %s<peer port>", m, want)
			continue
		}
		port, _ := strconv.ParseInt(m[strings.LastIndex(m, ":")+1:], 10, 32)
		if cp, ok := containerPort(c, intstr.FromInt32(int32(port)), corev1.ProtocolTCP); !ok || cp.Name != "peer" {
			t.Errorf("etcd --initial-cluster member %q: not the peer port", m)
		}
	}
	for _, p := range []*corev1.Probe{c.ReadinessProbe, c.LivenessProbe} {
		if p == nil || p.HTTPGet == nil {
			t.Errorf("etcd needs httpGet readiness and liveness probes")
		} else if _, ok := containerPort(c, p.HTTPGet.Port, corev1.ProtocolTCP); !ok {
			t.Errorf("etcd probe port %s is not a containerPort", p.HTTPGet.Port.String())
		}
	}
	if len(sts.Spec.VolumeClaimTemplates) != 1 {
		t.Errorf("etcd needs one volumeClaimTemplate for its data")
	}
	found := false
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err == nil && sel.Matches(labels.Set(sts.Spec.Template.Labels)) {
			found = pdb.Spec.MaxUnavailable != nil && pdb.Spec.MaxUnavailable.String() == "1"
		}
	}
	if !found {
		t.Errorf("no PodDisruptionBudget with maxUnavailable 1 keeps etcd's quorum")
	}
	for _, p := range etcdPolicyProblems(o) {
		t.Error(p)
	}
}

// checkSelectors: each StatefulSet selects its own pods, and each Service
// and PodDisruptionBudget selects the pods of exactly one StatefulSet.
func checkSelectors(t *testing.T, o *objects) {
	t.Helper()
	for _, s := range o.statefulSets {
		sel, err := metav1.LabelSelectorAsSelector(s.Spec.Selector)
		if err != nil || sel.Empty() || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
			t.Errorf("StatefulSet %s: selector %v does not select its pod template labels %v", s.Name, s.Spec.Selector, s.Spec.Template.Labels)
		}
		if a := s.Spec.Template.Spec.Affinity; a == nil || a.PodAntiAffinity == nil {
			t.Errorf("StatefulSet %s: no pod anti-affinity", s.Name)
		} else {
			for _, w := range a.PodAntiAffinity.PreferredDuringSchedulingIgnoredDuringExecution {
				sel, err := metav1.LabelSelectorAsSelector(w.PodAffinityTerm.LabelSelector)
				if err != nil || !sel.Matches(labels.Set(s.Spec.Template.Labels)) {
					t.Errorf("StatefulSet %s: anti-affinity term does not select its own pods", s.Name)
				}
			}
		}
	}
	selects := func(what string, sel labels.Selector) {
		n := 0
		for _, s := range o.statefulSets {
			if sel.Matches(labels.Set(s.Spec.Template.Labels)) {
				n++
			}
		}
		if sel.Empty() || n != 1 {
			t.Errorf("%s selects the pods of %d StatefulSets, want 1", what, n)
		}
	}
	for _, svc := range o.services {
		selects("Service "+svc.Name, labels.SelectorFromSet(svc.Spec.Selector))
	}
	for _, pdb := range o.pdbs {
		sel, err := metav1.LabelSelectorAsSelector(pdb.Spec.Selector)
		if err != nil {
			t.Errorf("PodDisruptionBudget %s: %v", pdb.Name, err)
			continue
		}
		selects("PodDisruptionBudget "+pdb.Name, sel)
	}
	// A NetworkPolicy that selects no pod of the rendering (say, etcd's
	// left behind by an overlay that drops etcd) protects nothing.
	for _, np := range o.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil {
			t.Errorf("NetworkPolicy %s: %v", np.Name, err)
			continue
		}
		selects("NetworkPolicy "+np.Name, sel)
	}
}

// checkSiloNetworkPolicy: the silo pods' peer and gossip ports admit only
// silo pods (a request on the peer port skips the gateway's authentication
// and ACL), and every port a rule names is a declared container port.
func checkSiloNetworkPolicy(t *testing.T, o *objects) {
	t.Helper()
	silo := o.statefulSets["silo"]
	if silo == nil {
		t.Fatal("no StatefulSet silo")
	}
	podLabels := labels.Set(silo.Spec.Template.Labels)
	declared := map[string]bool{}
	for _, c := range silo.Spec.Template.Spec.Containers {
		for _, p := range c.Ports {
			declared[p.Name] = true
		}
	}
	internal := map[string]bool{"peer": true, "gossip": true, "gossip-udp": true}
	covered := false
	for _, np := range o.netpols {
		sel, err := metav1.LabelSelectorAsSelector(&np.Spec.PodSelector)
		if err != nil || !sel.Matches(podLabels) {
			continue
		}
		covered = true
		for _, rule := range np.Spec.Ingress {
			onlySilos := len(rule.From) > 0
			for _, from := range rule.From {
				fs, err := metav1.LabelSelectorAsSelector(from.PodSelector)
				if from.PodSelector == nil || err != nil || fs.Empty() || !fs.Matches(podLabels) || from.IPBlock != nil || from.NamespaceSelector != nil {
					onlySilos = false
				}
			}
			if len(rule.Ports) == 0 && !onlySilos {
				t.Errorf("NetworkPolicy %s: a rule admits every port from outside the silos", np.Name)
			}
			for _, p := range rule.Ports {
				if p.Port == nil || !declared[p.Port.String()] {
					t.Errorf("NetworkPolicy %s: port %v is not a named container port of the silo", np.Name, p.Port)
					continue
				}
				if internal[p.Port.String()] && !onlySilos {
					t.Errorf("NetworkPolicy %s: port %s is open beyond the silo pods", np.Name, p.Port.String())
				}
			}
		}
	}
	if !covered {
		t.Error("no NetworkPolicy selects the silo pods: their peer and gossip ports would be open to every pod")
	}
}

// checkServicePorts: each Service port targets a declared container port of
// the pods it selects, with the same protocol.
func checkServicePorts(t *testing.T, o *objects) {
	t.Helper()
	for _, svc := range o.services {
		for _, s := range o.statefulSets {
			if !labels.SelectorFromSet(svc.Spec.Selector).Matches(labels.Set(s.Spec.Template.Labels)) {
				continue
			}
			for _, sp := range svc.Spec.Ports {
				proto := sp.Protocol
				if proto == "" {
					proto = corev1.ProtocolTCP
				}
				target := sp.TargetPort
				if target.Type == intstr.Int && target.IntVal == 0 {
					target = intstr.FromInt32(sp.Port)
				}
				found := false
				for i := range s.Spec.Template.Spec.Containers {
					if _, ok := containerPort(&s.Spec.Template.Spec.Containers[i], target, proto); ok {
						found = true
					}
				}
				if !found {
					t.Errorf("Service %s port %s: target %s/%s is no containerPort of StatefulSet %s", svc.Name, sp.Name, target.String(), proto, s.Name)
				}
				if errs := validation.IsValidPortName(sp.Name); len(errs) > 0 {
					t.Errorf("Service %s port name %q: %v", svc.Name, sp.Name, errs)
				}
			}
		}
	}
}

// checkPod: security context, resources, volumes and images of every pod.
func checkPod(t *testing.T, s *appsv1.StatefulSet, o *objects, want variant) {
	t.Helper()
	pod := &s.Spec.Template.Spec
	psc := pod.SecurityContext
	if psc == nil || psc.RunAsNonRoot == nil || !*psc.RunAsNonRoot || psc.RunAsUser == nil || *psc.RunAsUser == 0 {
		t.Errorf("StatefulSet %s: the pod must run as a non-root numeric user", s.Name)
	}
	if psc == nil || psc.SeccompProfile == nil || psc.SeccompProfile.Type != corev1.SeccompProfileTypeRuntimeDefault {
		t.Errorf("StatefulSet %s: want seccompProfile RuntimeDefault", s.Name)
	}
	if pod.AutomountServiceAccountToken == nil || *pod.AutomountServiceAccountToken {
		t.Errorf("StatefulSet %s: mounts a service account token it does not use", s.Name)
	}
	volumes := map[string]bool{}
	for _, v := range pod.Volumes {
		volumes[v.Name] = false
		switch {
		case v.ConfigMap != nil:
			if _, ok := o.configMaps[v.ConfigMap.Name]; !ok && !slices.Contains(want.external, v.ConfigMap.Name) {
				t.Errorf("StatefulSet %s volume %s: no ConfigMap %s", s.Name, v.Name, v.ConfigMap.Name)
			}
		case v.Secret != nil:
			if _, ok := o.secrets[v.Secret.SecretName]; !ok && !slices.Contains(want.external, v.Secret.SecretName) {
				t.Errorf("StatefulSet %s volume %s: no Secret %s", s.Name, v.Name, v.Secret.SecretName)
			}
		}
	}
	for _, v := range s.Spec.VolumeClaimTemplates {
		volumes[v.Name] = false
	}
	for _, c := range pod.Containers {
		sc := c.SecurityContext
		switch {
		case sc == nil:
			t.Errorf("container %s: no securityContext", c.Name)
		case sc.ReadOnlyRootFilesystem == nil || !*sc.ReadOnlyRootFilesystem:
			t.Errorf("container %s: root filesystem is writable", c.Name)
		case sc.AllowPrivilegeEscalation == nil || *sc.AllowPrivilegeEscalation:
			t.Errorf("container %s: privilege escalation allowed", c.Name)
		case sc.Privileged != nil && *sc.Privileged:
			t.Errorf("container %s: privileged", c.Name)
		case sc.Capabilities == nil || !slices.Contains(sc.Capabilities.Drop, "ALL") || len(sc.Capabilities.Add) > 0:
			t.Errorf("container %s: capabilities must drop ALL and add none", c.Name)
		case sc.RunAsUser != nil && *sc.RunAsUser == 0:
			t.Errorf("container %s: runs as root", c.Name)
		}
		for _, r := range []corev1.ResourceName{corev1.ResourceCPU, corev1.ResourceMemory} {
			req, okReq := c.Resources.Requests[r]
			lim, okLim := c.Resources.Limits[r]
			if !okReq || !okLim {
				t.Errorf("container %s: %s request and limit must both be set", c.Name, r)
			} else if req.Cmp(lim) > 0 {
				t.Errorf("container %s: %s request %s above limit %s", c.Name, r, req.String(), lim.String())
			}
		}
		for _, m := range c.VolumeMounts {
			if _, ok := volumes[m.Name]; !ok {
				t.Errorf("container %s mounts %s, which is no volume", c.Name, m.Name)
			}
			volumes[m.Name] = true
		}
		for _, p := range c.Ports {
			if errs := validation.IsValidPortName(p.Name); len(errs) > 0 {
				t.Errorf("container %s port name %q: %v", c.Name, p.Name, errs)
			}
		}
		if _, tag, ok := strings.Cut(c.Image[strings.LastIndex(c.Image, "/")+1:], ":"); !ok || tag == "latest" {
			t.Errorf("container %s: image %q has no pinned tag", c.Name, c.Image)
		}
	}
	for v, used := range volumes {
		if !used {
			t.Errorf("StatefulSet %s: volume %s is mounted nowhere", s.Name, v)
		}
	}
}

// keyFile is the silo's API-key file (auth.Config.KeyFile).
type keyFile struct {
	Keys []struct {
		SHA256    string   `json:"sha256"`
		Principal string   `json:"principal"`
		Groups    []string `json:"groups,omitempty"`
	} `json:"keys"`
}

func sha256Hex(s string) string {
	h := sha256.Sum256([]byte(s))
	return hex.EncodeToString(h[:])
}

// checkKeySecret: the rendered Secret silo-auth holds exactly the key file
// make-keys.sh wrote: no variant brings a key file of its own (such as a
// placeholder that matches no key).
func checkKeySecret(t *testing.T, o *objects, want []byte) {
	t.Helper()
	n := 0
	for name, s := range o.secrets {
		if !strings.HasPrefix(name, "silo-auth-") {
			continue
		}
		n++
		if got := s.Data["keys.json"]; !bytes.Equal(got, want) {
			t.Errorf("Secret %s holds keys.json\n%s\nwant what make-keys.sh wrote:\n%s", name, got, want)
		}
	}
	if n != 1 {
		t.Errorf("%d Secrets silo-auth-…, want 1", n)
	}
}
