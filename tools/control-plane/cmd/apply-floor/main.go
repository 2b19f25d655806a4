// Command apply-floor measures how fast the API server accepts a directory of manifests by
// server-side apply, to give the apply and scale benchmarks a floor: Namespaces and CRDs first
// (each CRD waited for until Established), then every other object, `concurrency` at once, with
// no client-side rate limit, no reads and no dry runs. It runs one trial per concurrency, each on
// its own copy of the manifests (fresh namespaces and CRD groups, so no trial finds another's
// objects), prints each trial's time on stderr and the best as "SECONDS CONCURRENCY" on stdout.
//
// With --bundles it writes what any provisioner must for each bundle: every Bundle (gantry.dev)
// starts one, the objects after it up to the next Bundle are its. Each in a provisioner's order:
// the Bundle applied without its status (its creation), then its objects, then its `status`
// written by a merge patch through the status subresource; `concurrency` bundles and
// `concurrency` requests at once.
//
// With --dry-run-first it asks before it writes, as a tool must that never leaves part of its
// objects written when the API server refuses one: each step's objects (the Namespaces and
// CRDs; then the rest, or a bundle's objects) are sent with `dryRun=All` first, all of them,
// and written only once every one was accepted. It is the floor of such a tool.
//
//	apply-floor --concurrency 1,8,32,64 DIR1 DIR2 DIR3 DIR4
//	apply-floor --dry-run-first --concurrency 1,8,32,64 DIR1 DIR2 DIR3 DIR4
//	apply-floor --bundles --concurrency 32 DIR
package main

import (
	"context"
	"encoding/json"
	"errors"
	"flag"
	"fmt"
	"io"
	"os"
	"path/filepath"
	"sort"
	"strconv"
	"strings"
	"sync"
	"time"

	"k8s.io/apimachinery/pkg/api/meta"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	"k8s.io/apimachinery/pkg/apis/meta/v1/unstructured"
	"k8s.io/apimachinery/pkg/runtime/schema"
	"k8s.io/apimachinery/pkg/types"
	utilyaml "k8s.io/apimachinery/pkg/util/yaml"
	"k8s.io/client-go/discovery"
	"k8s.io/client-go/dynamic"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/restmapper"
	"k8s.io/client-go/tools/clientcmd"
)

const fieldManager = "apply-floor"

var crdResource = schema.GroupVersionResource{Group: "apiextensions.k8s.io", Version: "v1", Resource: "customresourcedefinitions"}

func main() {
	kubeconfig := flag.String("kubeconfig", os.Getenv("KUBECONFIG"), "kubeconfig of the API server")
	concurrencies := flag.String("concurrency", "1,8,32,64", "comma-separated concurrencies, one per directory")
	timeout := flag.Duration("timeout", 10*time.Minute, "deadline of each trial")
	bundles := flag.Bool("bundles", false, "per bundle (a Bundle and the objects after it): create the Bundle, apply its objects, write its status")
	dryRunFirst := flag.Bool("dry-run-first", false, "dry-run each step's objects, all of them, before writing any of them")
	flag.Parse()
	if err := run(*kubeconfig, *concurrencies, *timeout, *bundles, *dryRunFirst, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "apply-floor:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, concurrencies string, timeout time.Duration, bundles, dryRunFirst bool, dirs []string) error {
	var levels []int
	for _, field := range strings.Split(concurrencies, ",") {
		n, err := strconv.Atoi(strings.TrimSpace(field))
		if err != nil || n < 1 {
			return fmt.Errorf("--concurrency: %q is not a positive integer", field)
		}
		levels = append(levels, n)
	}
	if len(dirs) != len(levels) {
		return fmt.Errorf("%d directories for %d concurrencies: give one directory per concurrency", len(dirs), len(levels))
	}
	config, err := clientcmd.BuildConfigFromFlags("", kubeconfig)
	if err != nil {
		return fmt.Errorf("reading kubeconfig %s: %w", kubeconfig, err)
	}
	// No client-side rate limit: the API server is the only limit measured.
	config.QPS = -1
	client, err := dynamic.NewForConfig(config)
	if err != nil {
		return err
	}
	bestSeconds, bestLevel := 0.0, 0
	for i, dir := range dirs {
		objects, err := readDir(dir)
		if err != nil {
			return err
		}
		mapper, err := newMapper(config, objects)
		if err != nil {
			return err
		}
		ctx, cancel := context.WithTimeout(context.Background(), timeout)
		start := time.Now()
		statusWrites, err := applyAll(ctx, client, mapper, objects, levels[i], bundles, dryRunFirst)
		seconds := time.Since(start).Seconds()
		cancel()
		if err != nil {
			return fmt.Errorf("%s (concurrency %d): %w", dir, levels[i], err)
		}
		writes := ""
		if bundles {
			writes = fmt.Sprintf(" and %d status writes", statusWrites)
		}
		fmt.Fprintf(os.Stderr, "concurrency %3d: %d objects%s in %.2f s\n", levels[i], len(objects), writes, seconds)
		if bestLevel == 0 || seconds < bestSeconds {
			bestSeconds, bestLevel = seconds, levels[i]
		}
	}
	fmt.Printf("%.3f %d\n", bestSeconds, bestLevel)
	return nil
}

// readDir decodes every YAML or JSON document of the files directly in dir, in name order.
func readDir(dir string) ([]*unstructured.Unstructured, error) {
	entries, err := os.ReadDir(dir)
	if err != nil {
		return nil, err
	}
	var names []string
	for _, entry := range entries {
		ext := filepath.Ext(entry.Name())
		if !entry.IsDir() && (ext == ".yaml" || ext == ".yml" || ext == ".json") {
			names = append(names, entry.Name())
		}
	}
	sort.Strings(names)
	var objects []*unstructured.Unstructured
	for _, name := range names {
		path := filepath.Join(dir, name)
		file, err := os.Open(path)
		if err != nil {
			return nil, err
		}
		decoder := utilyaml.NewYAMLOrJSONDecoder(file, 64*1024)
		for {
			var object map[string]any
			if err := decoder.Decode(&object); err != nil {
				if errors.Is(err, io.EOF) {
					break
				}
				file.Close()
				return nil, fmt.Errorf("%s: %w", path, err)
			}
			if len(object) > 0 {
				objects = append(objects, &unstructured.Unstructured{Object: object})
			}
		}
		file.Close()
	}
	return objects, nil
}

// mapping is how an object's kind is reached: its resource and whether it is namespaced.
type mapping struct {
	resource   schema.GroupVersionResource
	namespaced bool
}

// mapper resolves kinds: those a CRD of the directory defines from the CRD itself (they are
// not served yet when the trial starts), the others by discovery.
type mapper struct {
	defined   map[schema.GroupVersionKind]mapping
	discovery meta.RESTMapper
}

func newMapper(config *rest.Config, objects []*unstructured.Unstructured) (*mapper, error) {
	client, err := discovery.NewDiscoveryClientForConfig(config)
	if err != nil {
		return nil, err
	}
	resources, err := restmapper.GetAPIGroupResources(client)
	if err != nil {
		return nil, fmt.Errorf("discovery: %w", err)
	}
	m := &mapper{defined: map[schema.GroupVersionKind]mapping{}, discovery: restmapper.NewDiscoveryRESTMapper(resources)}
	for _, object := range objects {
		if object.GetKind() != "CustomResourceDefinition" {
			continue
		}
		group, _, _ := unstructured.NestedString(object.Object, "spec", "group")
		kind, _, _ := unstructured.NestedString(object.Object, "spec", "names", "kind")
		plural, _, _ := unstructured.NestedString(object.Object, "spec", "names", "plural")
		scope, _, _ := unstructured.NestedString(object.Object, "spec", "scope")
		versions, _, _ := unstructured.NestedSlice(object.Object, "spec", "versions")
		for _, version := range versions {
			name, _, _ := unstructured.NestedString(version.(map[string]any), "name")
			m.defined[schema.GroupVersionKind{Group: group, Version: name, Kind: kind}] = mapping{
				resource:   schema.GroupVersionResource{Group: group, Version: name, Resource: plural},
				namespaced: scope == "Namespaced",
			}
		}
	}
	return m, nil
}

func (m *mapper) resolve(object *unstructured.Unstructured) (mapping, error) {
	gvk := object.GroupVersionKind()
	if found, ok := m.defined[gvk]; ok {
		return found, nil
	}
	found, err := m.discovery.RESTMapping(gvk.GroupKind(), gvk.Version)
	if err != nil {
		return mapping{}, fmt.Errorf("%s %s: %w", gvk, object.GetName(), err)
	}
	return mapping{resource: found.Resource, namespaced: found.Scope.Name() == meta.RESTScopeNameNamespace}, nil
}

func isBarrier(object *unstructured.Unstructured) bool {
	gvk := object.GroupVersionKind()
	return (gvk.Group == "" && gvk.Kind == "Namespace") ||
		(gvk.Group == "apiextensions.k8s.io" && gvk.Kind == "CustomResourceDefinition")
}

// applyAll applies objects (by bundle with `bundles`; each step dry-run first with
// `dryRunFirst`) and returns how many status writes it made.
func applyAll(ctx context.Context, client dynamic.Interface, m *mapper, objects []*unstructured.Unstructured, concurrency int, bundles, dryRunFirst bool) (int, error) {
	var barriers, rest []*unstructured.Unstructured
	for _, object := range objects {
		if isBarrier(object) {
			barriers = append(barriers, object)
		} else {
			rest = append(rest, object)
		}
	}
	apply := func(ctx context.Context, object *unstructured.Unstructured) error {
		return applyOne(ctx, client, m, object, false)
	}
	dryRun := func(ctx context.Context, object *unstructured.Unstructured) error {
		return applyOne(ctx, client, m, object, true)
	}
	// step writes objects, `concurrency` at once, once (with dryRunFirst) all of them passed a
	// dry run.
	step := func(ctx context.Context, objects []*unstructured.Unstructured, concurrency int, apply, dryRun func(context.Context, *unstructured.Unstructured) error) error {
		if dryRunFirst {
			if err := forEach(ctx, objects, concurrency, dryRun); err != nil {
				return err
			}
		}
		return forEach(ctx, objects, concurrency, apply)
	}
	if err := step(ctx, barriers, concurrency, apply, dryRun); err != nil {
		return 0, err
	}
	for _, object := range barriers {
		if object.GetKind() == "CustomResourceDefinition" {
			if err := waitEstablished(ctx, client, object.GetName()); err != nil {
				return 0, err
			}
		}
	}
	if !bundles {
		return 0, step(ctx, rest, concurrency, apply, dryRun)
	}
	groups, err := groupByBundle(rest)
	if err != nil {
		return 0, err
	}
	// `concurrency` requests at once, as without --bundles: a bundle's objects are applied side
	// by side, so that the last bundles do not leave the API server idle.
	requests := make(chan struct{}, concurrency)
	limited := func(ctx context.Context, do func() error) error {
		select {
		case requests <- struct{}{}:
		case <-ctx.Done():
			return ctx.Err()
		}
		defer func() { <-requests }()
		return do()
	}
	applyLimited := func(ctx context.Context, object *unstructured.Unstructured) error {
		return limited(ctx, func() error { return apply(ctx, object) })
	}
	dryRunLimited := func(ctx context.Context, object *unstructured.Unstructured) error {
		return limited(ctx, func() error { return dryRun(ctx, object) })
	}
	return len(groups), forEach(ctx, groups, concurrency, func(ctx context.Context, b bundle) error {
		if err := applyLimited(ctx, b.object); err != nil {
			return err
		}
		if err := step(ctx, b.objects, max(1, len(b.objects)), applyLimited, dryRunLimited); err != nil {
			return err
		}
		return limited(ctx, func() error { return writeStatus(ctx, client, m, b) })
	})
}

// bundle is what a provisioner writes for one bundle: the Bundle (without its status), the
// objects it installs, then its status.
type bundle struct {
	object  *unstructured.Unstructured
	status  map[string]any
	objects []*unstructured.Unstructured
}

func isBundle(object *unstructured.Unstructured) bool {
	gvk := object.GroupVersionKind()
	return gvk.Group == "gantry.dev" && gvk.Kind == "Bundle"
}

// groupByBundle splits objects at each Bundle: the objects after a Bundle are its.
func groupByBundle(objects []*unstructured.Unstructured) ([]bundle, error) {
	var groups []bundle
	for _, object := range objects {
		if !isBundle(object) {
			if len(groups) == 0 {
				return nil, fmt.Errorf("%s %s/%s comes before any Bundle: with --bundles each object follows the Bundle it belongs to", object.GetKind(), object.GetNamespace(), object.GetName())
			}
			groups[len(groups)-1].objects = append(groups[len(groups)-1].objects, object)
			continue
		}
		status, found, err := unstructured.NestedMap(object.Object, "status")
		if err != nil || !found {
			return nil, fmt.Errorf("Bundle %s has no status to write (a map at .status)", object.GetName())
		}
		created := object.DeepCopy()
		unstructured.RemoveNestedField(created.Object, "status")
		groups = append(groups, bundle{object: created, status: status})
	}
	return groups, nil
}

// writeStatus merge-patches b's status through the status subresource.
func writeStatus(ctx context.Context, client dynamic.Interface, m *mapper, b bundle) error {
	found, err := m.resolve(b.object)
	if err != nil {
		return err
	}
	patch, err := json.Marshal(map[string]any{"status": b.status})
	if err != nil {
		return err
	}
	_, err = client.Resource(found.resource).Patch(ctx, b.object.GetName(), types.MergePatchType, patch, metav1.PatchOptions{FieldManager: fieldManager}, "status")
	if err != nil {
		return fmt.Errorf("writing the status of Bundle %s: %w", b.object.GetName(), err)
	}
	return nil
}

// forEach calls do for every item, `concurrency` at once; the first error stops the others.
func forEach[T any](ctx context.Context, items []T, concurrency int, do func(context.Context, T) error) error {
	work := make(chan T)
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for item := range work {
				if err := do(ctx, item); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, item := range items {
		select {
		case work <- item:
		case <-ctx.Done():
			break feed
		}
	}
	close(work)
	wg.Wait()
	close(errs)
	if err := <-errs; err != nil {
		return err
	}
	return ctx.Err()
}

// applyOne applies object (only a dry run with `dryRun`); a kind of a CRD that was just
// established may take a moment to be served, so a 404 is retried until the deadline.
func applyOne(ctx context.Context, client dynamic.Interface, m *mapper, object *unstructured.Unstructured, dryRun bool) error {
	found, err := m.resolve(object)
	if err != nil {
		return err
	}
	resource := client.Resource(found.resource)
	var target dynamic.ResourceInterface = resource
	if found.namespaced {
		target = resource.Namespace(object.GetNamespace())
	}
	for {
		options := metav1.ApplyOptions{FieldManager: fieldManager, Force: true}
		if dryRun {
			options.DryRun = []string{metav1.DryRunAll}
		}
		_, err := target.Apply(ctx, object.GetName(), object, options)
		if err == nil {
			return nil
		}
		if !isNotFound(err) || ctx.Err() != nil {
			return fmt.Errorf("applying %s %s/%s: %w", object.GetKind(), object.GetNamespace(), object.GetName(), err)
		}
		time.Sleep(20 * time.Millisecond)
	}
}

func isNotFound(err error) bool {
	var status interface{ Status() metav1.Status }
	return errors.As(err, &status) && status.Status().Code == 404
}

func waitEstablished(ctx context.Context, client dynamic.Interface, name string) error {
	for {
		crd, err := client.Resource(crdResource).Get(ctx, name, metav1.GetOptions{})
		if err != nil {
			return fmt.Errorf("reading CRD %s: %w", name, err)
		}
		conditions, _, _ := unstructured.NestedSlice(crd.Object, "status", "conditions")
		for _, condition := range conditions {
			c, _ := condition.(map[string]any)
			if c["type"] == "Established" && c["status"] == "True" {
				return nil
			}
		}
		select {
		case <-ctx.Done():
			return fmt.Errorf("CRD %s not established: %w", name, ctx.Err())
		case <-time.After(20 * time.Millisecond):
		}
	}
}
