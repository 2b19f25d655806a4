package main

import (
	"bytes"
	"context"
	"encoding/json"
	"errors"
	"fmt"
	"log/slog"
	"net/http"
	"strings"
	"unicode/utf8"
)

// The contract's constants (docs/plugins.md).
const (
	contract        = "v1"
	pathPrefix      = "/gantry.dev/v1/"
	provisionerID   = "gantry.dev/helm"
	helmConfigType  = "application/vnd.cncf.helm.config.v1+json"
	helmChartLayer  = "application/vnd.cncf.helm.chart.content.v1.tar+gzip"
	maxErrorMessage = 32768
)

// The documents of the contract. Field names and omissions follow api/src/plugin.rs: optional
// fields are left out when empty, exactly as the Rust side writes them.

type identity struct {
	Contract     string   `json:"contract"`
	ID           string   `json:"id"`
	Version      string   `json:"version"`
	MediaTypes   []string `json:"mediaTypes"`
	Capabilities []string `json:"capabilities,omitempty"`
}

type probe struct {
	Ready   bool   `json:"ready"`
	Message string `json:"message,omitempty"`
}

type renderRequest struct {
	Contract string         `json:"contract"`
	Content  content        `json:"content"`
	Config   map[string]any `json:"config"`
	Release  release        `json:"release"`
	Cluster  cluster        `json:"cluster"`
}

type content struct {
	MediaType string  `json:"mediaType"`
	Digest    string  `json:"digest"`
	Layers    []layer `json:"layers"`
	Config    string  `json:"config"`
}

type layer struct {
	MediaType string `json:"mediaType"`
	Digest    string `json:"digest"`
	Data      string `json:"data"`
}

type release struct {
	Name      string `json:"name"`
	Namespace string `json:"namespace"`
}

type cluster struct {
	Version     string   `json:"version"`
	APIVersions []string `json:"apiVersions"`
}

type renderResponse struct {
	Objects  []renderedObject `json:"objects"`
	Warnings []string         `json:"warnings,omitempty"`
	Notes    string           `json:"notes,omitempty"`
}

type renderedObject struct {
	Object map[string]any `json:"object"`
	Source *source        `json:"source,omitempty"`
	Wave   int            `json:"wave,omitempty"`
}

type source struct {
	File string `json:"file"`
	Line int    `json:"line,omitempty"`
}

type errorResponse struct {
	Error pluginError `json:"error"`
}

type pluginError struct {
	Message   string `json:"message"`
	File      string `json:"file,omitempty"`
	Line      int    `json:"line,omitempty"`
	Retryable bool   `json:"retryable"`
}

// callError is a failed call: its HTTP status and the error document to answer with.
type callError struct {
	status int
	pluginError
}

func (e *callError) Error() string { return e.Message }

// invalid is a 422: the input is wrong, and retrying it cannot help.
func invalid(format string, args ...any) *callError {
	return &callError{status: http.StatusUnprocessableEntity, pluginError: pluginError{Message: fmt.Sprintf(format, args...)}}
}

// unavailable is a 503: something on the plugin's side failed, and a retry may succeed.
func unavailable(format string, args ...any) *callError {
	return &callError{status: http.StatusServiceUnavailable, pluginError: pluginError{Message: fmt.Sprintf(format, args...), Retryable: true}}
}

// server serves the three calls, each behind the token check.
type server struct {
	auth            *authenticator
	maxRequestBytes int64
	// render is replaceable so that tests can provoke internal failures.
	render func(context.Context, *renderRequest) (*renderResponse, error)
}

func newServer(reviewer TokenReviewer, audience, allowedUser string, maxRequestBytes int64) *server {
	s := &server{maxRequestBytes: maxRequestBytes, render: render}
	if reviewer != nil {
		s.auth = newAuthenticator(reviewer, audience, allowedUser)
	}
	return s
}

func (s *server) ServeHTTP(w http.ResponseWriter, r *http.Request) {
	defer func() {
		if p := recover(); p != nil {
			slog.Error("panic while serving", "path", r.URL.Path, "panic", p)
			writeError(w, unavailable("internal error: %v", p))
		}
	}()
	// The token is checked before anything else, unknown paths included, so that a caller
	// without Gantry's token learns nothing about the plugin.
	if err := s.authenticate(r); err != nil {
		writeError(w, err)
		return
	}
	var allowed string
	var handle func(*http.Request) (any, *callError)
	switch r.URL.Path {
	case pathPrefix + "identity":
		allowed, handle = http.MethodGet, s.identity
	case pathPrefix + "probe":
		allowed, handle = http.MethodGet, s.probe
	case pathPrefix + "render":
		allowed, handle = http.MethodPost, s.renderCall
	default:
		writeError(w, &callError{status: http.StatusNotFound, pluginError: pluginError{Message: fmt.Sprintf("no such call: %s", r.URL.Path)}})
		return
	}
	if r.Method != allowed {
		w.Header().Set("Allow", allowed)
		writeError(w, &callError{status: http.StatusMethodNotAllowed, pluginError: pluginError{Message: fmt.Sprintf("%s takes %s, not %s", r.URL.Path, allowed, r.Method)}})
		return
	}
	if r.ContentLength > s.maxRequestBytes {
		writeError(w, tooLarge(s.maxRequestBytes))
		return
	}
	// Bodies are read through the limit; passing w makes the server close the connection
	// after answering, rather than read the rest of an oversized body.
	r.Body = http.MaxBytesReader(w, r.Body, s.maxRequestBytes)
	answer, err := handle(r)
	if err != nil {
		writeError(w, err)
		return
	}
	writeJSON(w, http.StatusOK, answer)
}

func (s *server) authenticate(r *http.Request) *callError {
	refuse := func(message string) *callError {
		return &callError{status: http.StatusUnauthorized, pluginError: pluginError{Message: message}}
	}
	if s.auth == nil {
		return unavailable("the token reviewer is not configured")
	}
	token, ok := strings.CutPrefix(r.Header.Get("Authorization"), "Bearer ")
	token = strings.TrimSpace(token)
	if !ok || token == "" {
		return refuse("a bearer token is required")
	}
	refusal, err := s.auth.check(r.Context(), token)
	if err != nil {
		// No answer from the API server is not a refusal: say so, and let Gantry retry.
		slog.Warn("token review failed", "error", err)
		return unavailable("%v", err)
	}
	if refusal != "" {
		return refuse(refusal)
	}
	return nil
}

func (s *server) identity(*http.Request) (any, *callError) {
	return identity{
		Contract:     contract,
		ID:           provisionerID,
		Version:      version,
		MediaTypes:   []string{helmConfigType},
		Capabilities: []string{"waves", "notes"},
	}, nil
}

// probe answers ready: everything rendering needs is in the binary, and the token reviewer
// exists once the server does.
func (s *server) probe(*http.Request) (any, *callError) {
	return probe{Ready: true}, nil
}

func (s *server) renderCall(r *http.Request) (any, *callError) {
	decoder := json.NewDecoder(r.Body)
	// The schema allows no other fields: a misspelt one is an error, not silently ignored.
	decoder.DisallowUnknownFields()
	var request renderRequest
	err := decoder.Decode(&request)
	if err == nil && decoder.More() {
		err = errors.New("more than one JSON document")
	}
	if err != nil {
		if _, ok := errors.AsType[*http.MaxBytesError](err); ok {
			return nil, tooLarge(s.maxRequestBytes)
		}
		return nil, invalid("the request is not a render request: %v", err)
	}
	answer, err := s.render(r.Context(), &request)
	if err != nil {
		if e, ok := errors.AsType[*callError](err); ok {
			return nil, e
		}
		slog.Error("render failed", "error", err)
		return nil, unavailable("%v", err)
	}
	return answer, nil
}

func tooLarge(limit int64) *callError {
	return &callError{status: http.StatusRequestEntityTooLarge, pluginError: pluginError{Message: fmt.Sprintf("the request is larger than %d bytes", limit)}}
}

func writeError(w http.ResponseWriter, err *callError) {
	e := err.pluginError
	e.Message = truncate(e.Message, maxErrorMessage)
	if e.Message == "" {
		e.Message = http.StatusText(err.status)
	}
	writeJSON(w, err.status, errorResponse{Error: e})
}

func writeJSON(w http.ResponseWriter, status int, document any) {
	var buf bytes.Buffer
	encoder := json.NewEncoder(&buf)
	// Notes and messages are shown to people: keep <, > and & as they are.
	encoder.SetEscapeHTML(false)
	if err := encoder.Encode(document); err != nil {
		status = http.StatusServiceUnavailable
		buf.Reset()
		_ = json.NewEncoder(&buf).Encode(errorResponse{Error: pluginError{Message: "encoding the answer: " + err.Error(), Retryable: true}})
	}
	w.Header().Set("Content-Type", "application/json")
	w.Header().Set("Content-Length", fmt.Sprint(buf.Len()))
	w.WriteHeader(status)
	_, _ = w.Write(buf.Bytes())
}

// truncate cuts s to at most limit bytes on a UTF-8 boundary.
func truncate(s string, limit int) string {
	if len(s) <= limit {
		return s
	}
	cut := limit
	for cut > 0 && !utf8.RuneStart(s[cut]) {
		cut--
	}
	return s[:cut]
}
