// Command gantry-helm-plugin is Gantry's external provisioner for Helm charts: it serves the
// provisioner plugin contract v1 (docs/plugins.md) over HTTPS and renders charts with Helm's
// own Go packages, as `helm template` does, so that Gantry applies what Helm would install.
package main

import (
	"context"
	"crypto/tls"
	"errors"
	"flag"
	"fmt"
	"log/slog"
	"net/http"
	"os"
	"os/signal"
	"sync"
	"syscall"
	"time"
)

// version is the plugin's version. It is part of every rendered content's digest on Gantry's
// side, so it changes whenever the output for the same input may change (a Helm upgrade too).
const version = "0.1.0"

func main() {
	if err := run(os.Args[1:]); err != nil {
		fmt.Fprintln(os.Stderr, "gantry-helm-plugin:", err)
		os.Exit(1)
	}
}

func run(args []string) error {
	flags := flag.NewFlagSet("gantry-helm-plugin", flag.ContinueOnError)
	listen := flags.String("listen", ":8443", "address to serve HTTPS on")
	certFile := flags.String("tls-cert-file", "", "PEM serving certificate (chain); required")
	keyFile := flags.String("tls-key-file", "", "PEM private key of the serving certificate; required")
	kubeconfig := flags.String("kubeconfig", "", "kubeconfig for TokenReview; in-cluster config when empty")
	audience := flags.String("audience", defaultAudience, "audience the caller's token must be valid for")
	allowedUser := flags.String("allowed-user", defaultAllowedUser, "the only user (as TokenReview names it) allowed to call")
	maxRequestBytes := flags.Int64("max-request-bytes", 64<<20, "largest request body accepted; larger ones get 413")
	showVersion := flags.Bool("version", false, "print the version and exit")
	if err := flags.Parse(args); err != nil {
		return err
	}
	if *showVersion {
		fmt.Println(version)
		return nil
	}
	// There is deliberately no plain-HTTP mode: Gantry only calls plugins over verified TLS.
	if *certFile == "" || *keyFile == "" {
		return errors.New("--tls-cert-file and --tls-key-file are required")
	}
	if *maxRequestBytes <= 0 {
		return errors.New("--max-request-bytes must be positive")
	}
	certs := &certificateFiles{certFile: *certFile, keyFile: *keyFile}
	if _, err := certs.get(nil); err != nil {
		return err
	}
	reviewer, err := newKubeReviewer(*kubeconfig)
	if err != nil {
		return fmt.Errorf("building the TokenReview client: %w", err)
	}
	handler := newServer(reviewer, *audience, *allowedUser, *maxRequestBytes)

	srv := &http.Server{
		Addr:    *listen,
		Handler: handler,
		TLSConfig: &tls.Config{
			MinVersion:     tls.VersionTLS12,
			GetCertificate: certs.get,
		},
		// Renders may take long (Gantry's deadline is the bundle's timeout), so there is no
		// write timeout; slow clients are bounded while sending headers and when idle.
		ReadHeaderTimeout: 10 * time.Second,
		IdleTimeout:       2 * time.Minute,
		ErrorLog:          slog.NewLogLogger(slog.Default().Handler(), slog.LevelWarn),
	}

	ctx, stop := signal.NotifyContext(context.Background(), syscall.SIGINT, syscall.SIGTERM)
	defer stop()
	errs := make(chan error, 1)
	go func() {
		slog.Info("serving", "address", *listen, "version", version)
		errs <- srv.ListenAndServeTLS("", "")
	}()
	select {
	case err := <-errs:
		return err
	case <-ctx.Done():
	}
	// Let renders in flight finish before the pod goes away.
	shutdown, cancel := context.WithTimeout(context.Background(), 30*time.Second)
	defer cancel()
	return srv.Shutdown(shutdown)
}

// certificateFiles serves the key pair from disk and reloads it when either file changes, so
// a rotated certificate (a Secret updated by cert-manager, say) is used without a restart.
type certificateFiles struct {
	certFile, keyFile string

	mu       sync.Mutex
	cert     *tls.Certificate
	modTimes [2]time.Time
}

func (c *certificateFiles) get(*tls.ClientHelloInfo) (*tls.Certificate, error) {
	var modTimes [2]time.Time
	for i, name := range []string{c.certFile, c.keyFile} {
		info, err := os.Stat(name)
		if err != nil {
			return nil, err
		}
		modTimes[i] = info.ModTime()
	}
	c.mu.Lock()
	defer c.mu.Unlock()
	if c.cert != nil && modTimes == c.modTimes {
		return c.cert, nil
	}
	cert, err := tls.LoadX509KeyPair(c.certFile, c.keyFile)
	if err != nil {
		if c.cert != nil {
			// Mid-rotation the two files may briefly disagree: keep serving the old pair.
			slog.Warn("reloading the serving certificate failed; keeping the previous one", "error", err)
			return c.cert, nil
		}
		return nil, fmt.Errorf("loading the serving certificate: %w", err)
	}
	c.cert, c.modTimes = &cert, modTimes
	return c.cert, nil
}
