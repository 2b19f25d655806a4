// Command apply-floor measures how fast the API server accepts a directory of manifests by
// server-side apply, to give the apply benchmark a floor: Namespaces and CRDs first (each CRD
// waited for until Established), then every other object, `concurrency` at once, with no
// client-side rate limit, no reads and no dry runs. It runs one trial per concurrency, each on
// its own copy of the manifests (fresh namespaces and CRD groups, so no trial finds another's
// objects), prints each trial's time on stderr and the best as "SECONDS CONCURRENCY" on stdout.
//
//	apply-floor --concurrency 1,8,32,64 DIR1 DIR2 DIR3 DIR4
package main

import (
	"context"
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
	flag.Parse()
	if err := run(*kubeconfig, *concurrencies, *timeout, flag.Args()); err != nil {
		fmt.Fprintln(os.Stderr, "apply-floor:", err)
		os.Exit(1)
	}
}

func run(kubeconfig, concurrencies string, timeout time.Duration, dirs []string) error {
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
		err = applyAll(ctx, client, mapper, objects, levels[i])
		seconds := time.Since(start).Seconds()
		cancel()
		if err != nil {
			return fmt.Errorf("%s (concurrency %d): %w", dir, levels[i], err)
		}
		fmt.Fprintf(os.Stderr, "concurrency %3d: %d objects in %.2f s\n", levels[i], len(objects), seconds)
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

func applyAll(ctx context.Context, client dynamic.Interface, m *mapper, objects []*unstructured.Unstructured, concurrency int) error {
	var barriers, rest []*unstructured.Unstructured
	for _, object := range objects {
		if isBarrier(object) {
			barriers = append(barriers, object)
		} else {
			rest = append(rest, object)
		}
	}
	if err := applyConcurrently(ctx, client, m, barriers, concurrency); err != nil {
		return err
	}
	for _, object := range barriers {
		if object.GetKind() == "CustomResourceDefinition" {
			if err := waitEstablished(ctx, client, object.GetName()); err != nil {
				return err
			}
		}
	}
	return applyConcurrently(ctx, client, m, rest, concurrency)
}

func applyConcurrently(ctx context.Context, client dynamic.Interface, m *mapper, objects []*unstructured.Unstructured, concurrency int) error {
	work := make(chan *unstructured.Unstructured)
	errs := make(chan error, concurrency)
	var wg sync.WaitGroup
	ctx, cancel := context.WithCancel(ctx)
	defer cancel()
	for range concurrency {
		wg.Add(1)
		go func() {
			defer wg.Done()
			for object := range work {
				if err := applyOne(ctx, client, m, object); err != nil {
					errs <- err
					cancel()
					return
				}
			}
		}()
	}
feed:
	for _, object := range objects {
		select {
		case work <- object:
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

// applyOne applies object; a kind of a CRD that was just established may take a moment to be
// served, so a 404 is retried until the deadline.
func applyOne(ctx context.Context, client dynamic.Interface, m *mapper, object *unstructured.Unstructured) error {
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
		_, err := target.Apply(ctx, object.GetName(), object, metav1.ApplyOptions{FieldManager: fieldManager, Force: true})
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
