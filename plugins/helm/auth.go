package main

import (
	"context"
	"crypto/sha256"
	"fmt"
	"slices"
	"sync"
	"time"

	authenticationv1 "k8s.io/api/authentication/v1"
	metav1 "k8s.io/apimachinery/pkg/apis/meta/v1"
	authenticationclient "k8s.io/client-go/kubernetes/typed/authentication/v1"
	"k8s.io/client-go/rest"
	"k8s.io/client-go/tools/clientcmd"
)

const (
	// defaultAudience is the audience of the projected token Gantry presents.
	defaultAudience = "gantry.dev/provisioner-plugin"
	// defaultAllowedUser is Gantry's provisioner ServiceAccount.
	defaultAllowedUser = "system:serviceaccount:gantry-system:gantry-provisioner"

	// The contract allows caching a positive review for at most a minute: a token the kubelet
	// rotated away, or a ServiceAccount deleted, stops working within that time.
	positiveTTL = time.Minute
	// Refusals are remembered briefly only, so that a burst of calls with a bad token costs
	// one TokenReview, while a token that just became valid is not refused for long.
	negativeTTL = 5 * time.Second
	// maxCachedReviews bounds the cache; tokens beyond it are reviewed every time.
	maxCachedReviews = 1024
)

// Review is what the plugin needs from a TokenReview's status.
type Review struct {
	Authenticated bool
	Audiences     []string
	Username      string
}

// TokenReviewer reviews a bearer token for audiences; an error means no answer was had (the
// API server was unreachable, say), not that the token was refused.
type TokenReviewer interface {
	Review(ctx context.Context, token string, audiences []string) (Review, error)
}

// kubeReviewer sends TokenReviews (authentication.k8s.io/v1) to the API server.
type kubeReviewer struct {
	client authenticationclient.TokenReviewInterface
}

// newKubeReviewer builds a reviewer from the kubeconfig at path, or from the in-cluster
// configuration when path is empty.
func newKubeReviewer(path string) (*kubeReviewer, error) {
	var config *rest.Config
	var err error
	if path == "" {
		config, err = rest.InClusterConfig()
	} else {
		config, err = clientcmd.BuildConfigFromFlags("", path)
	}
	if err != nil {
		return nil, err
	}
	config.UserAgent = "gantry-helm-plugin/" + version
	// A TokenReview is tiny: JSON costs nothing, and works with anything that fronts the API
	// server (kubectl proxy, test servers), where client-go would otherwise send protobuf.
	config.ContentType = "application/json"
	config.AcceptContentTypes = "application/json"
	client, err := authenticationclient.NewForConfig(config)
	if err != nil {
		return nil, err
	}
	return &kubeReviewer{client: client.TokenReviews()}, nil
}

func (k *kubeReviewer) Review(ctx context.Context, token string, audiences []string) (Review, error) {
	ctx, cancel := context.WithTimeout(ctx, 10*time.Second)
	defer cancel()
	review, err := k.client.Create(ctx, &authenticationv1.TokenReview{
		Spec: authenticationv1.TokenReviewSpec{Token: token, Audiences: audiences},
	}, metav1.CreateOptions{})
	if err != nil {
		return Review{}, err
	}
	return Review{
		Authenticated: review.Status.Authenticated,
		Audiences:     review.Status.Audiences,
		Username:      review.Status.User.Username,
	}, nil
}

// authenticator decides whether a bearer token is Gantry's: reviewed for the audience, valid
// for it, and of the one allowed user. Decisions are cached by the token's SHA-256, so the
// cache never holds a token itself.
type authenticator struct {
	reviewer    TokenReviewer
	audience    string
	allowedUser string
	now         func() time.Time

	mu    sync.Mutex
	cache map[[sha256.Size]byte]decision
}

type decision struct {
	// refusal is why the token is refused; empty when it is accepted.
	refusal string
	expires time.Time
}

func newAuthenticator(reviewer TokenReviewer, audience, allowedUser string) *authenticator {
	return &authenticator{
		reviewer:    reviewer,
		audience:    audience,
		allowedUser: allowedUser,
		now:         time.Now,
		cache:       map[[sha256.Size]byte]decision{},
	}
}

// check returns an empty refusal when token is accepted, a message saying why when it is
// refused, and an error when the review itself failed (nothing is cached then).
func (a *authenticator) check(ctx context.Context, token string) (refusal string, err error) {
	key := sha256.Sum256([]byte(token))
	now := a.now()
	a.mu.Lock()
	cached, ok := a.cache[key]
	a.mu.Unlock()
	if ok && now.Before(cached.expires) {
		return cached.refusal, nil
	}

	review, err := a.reviewer.Review(ctx, token, []string{a.audience})
	if err != nil {
		return "", fmt.Errorf("reviewing the token: %w", err)
	}
	switch {
	case !review.Authenticated:
		refusal = "the token is not authenticated"
	case !slices.Contains(review.Audiences, a.audience):
		refusal = fmt.Sprintf("the token is not valid for the audience %q", a.audience)
	case review.Username != a.allowedUser:
		refusal = fmt.Sprintf("user %q is not allowed to call this plugin", review.Username)
	}
	ttl := positiveTTL
	if refusal != "" {
		ttl = negativeTTL
	}
	a.remember(key, decision{refusal: refusal, expires: now.Add(ttl)}, now)
	return refusal, nil
}

func (a *authenticator) remember(key [sha256.Size]byte, d decision, now time.Time) {
	a.mu.Lock()
	defer a.mu.Unlock()
	if len(a.cache) >= maxCachedReviews {
		for k, v := range a.cache {
			if !now.Before(v.expires) {
				delete(a.cache, k)
			}
		}
		if len(a.cache) >= maxCachedReviews {
			return
		}
	}
	a.cache[key] = d
}
