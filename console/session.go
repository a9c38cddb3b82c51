package console

import (
	"crypto/rand"
	"crypto/sha256"
	"crypto/subtle"
	"encoding/base64"
	"encoding/json"
	"net/http"
	"sync"
	"time"

	"github.com/go-llmflow/llmflow"
	"github.com/go-llmflow/llmflow/config"
)

// Cookie and header names. The session cookie is __Host- prefixed
// (Secure, Path=/, no Domain: no other host or path can set it).
const (
	sessionCookie = "__Host-llmflow-session"
	loginCookie   = "__Host-llmflow-login"
	csrfHeader    = "X-LLMflow-CSRF"
)

// session is one signed-in browser: a user signed in through the
// provider (user) or with a token (token, which never leaves this
// process), its CSRF token and its end.
type session struct {
	user    string
	idToken string // the provider's ID token of a single sign-on, for its logout
	token   string
	name    string // who, for the page: the user, or the token's principal
	csrf    string
	expires time.Time
}

// Store keeps the console's sessions, in this process, by the SHA-256 of
// the cookie's value; bounded (the oldest go first when full). It
// outlives a Console: serve keeps one across configuration reloads, so
// nobody is signed out by a reload.
type Store struct {
	ttl time.Duration
	max int
	now func() time.Time

	mu sync.Mutex
	m  map[[32]byte]*session
}

// NewStore returns an empty session store: sessions last ttl (0:
// config.DefaultSessionTTL); now is the clock (nil: time.Now).
func NewStore(ttl time.Duration, now func() time.Time) *Store {
	if ttl <= 0 {
		ttl = config.DefaultSessionTTL
	}
	if now == nil {
		now = time.Now
	}
	return &Store{ttl: ttl, max: 10_000, now: now, m: map[[32]byte]*session{}}
}

// random returns n random bytes, base64url.
func random(n int) string {
	b := make([]byte, n)
	rand.Read(b)
	return base64.RawURLEncoding.EncodeToString(b)
}

// create starts a session and returns its cookie value.
func (s *Store) create(sess session) (string, *session) {
	id := random(32)
	sess.csrf = random(32)
	now := s.now()
	sess.expires = now.Add(s.ttl)
	s.mu.Lock()
	defer s.mu.Unlock()
	if len(s.m) >= s.max {
		var oldest [32]byte
		var at time.Time
		for k, v := range s.m {
			if !v.expires.After(now) {
				delete(s.m, k)
				continue
			}
			if at.IsZero() || v.expires.Before(at) {
				oldest, at = k, v.expires
			}
		}
		if len(s.m) >= s.max {
			delete(s.m, oldest)
		}
	}
	p := &sess
	s.m[sha256.Sum256([]byte(id))] = p
	return id, p
}

// get returns the session of a cookie value; nil when it is unknown or
// over (then it is forgotten).
func (s *Store) get(id string) *session {
	k := sha256.Sum256([]byte(id))
	s.mu.Lock()
	defer s.mu.Unlock()
	v := s.m[k]
	if v != nil && !v.expires.After(s.now()) {
		delete(s.m, k)
		return nil
	}
	return v
}

func (s *Store) remove(id string) {
	s.mu.Lock()
	delete(s.m, sha256.Sum256([]byte(id)))
	s.mu.Unlock()
}

// of returns r's session: nil, nil without a cookie; an error for a
// cookie naming no live session.
func (c *Console) of(r *http.Request) (*session, string, error) {
	ck, err := r.Cookie(sessionCookie)
	if err != nil || ck.Value == "" {
		return nil, "", nil
	}
	s := c.sessions.get(ck.Value)
	if s == nil {
		return nil, "", errExpired
	}
	return s, ck.Value, nil
}

var (
	errExpired = llmflow.Errorf(llmflow.EUNAUTHORIZED, "console session expired or unknown: sign in again")
	errCSRF    = llmflow.Errorf(llmflow.EFORBIDDEN, "this write needs the console session's CSRF token in "+csrfHeader)
)

// safeMethod reports whether m changes nothing (no CSRF token needed).
func safeMethod(m string) bool {
	return m == http.MethodGet || m == http.MethodHead || m == http.MethodOptions
}

// checkCSRF refuses a write whose CSRF header is not the session's.
func checkCSRF(r *http.Request, s *session) error {
	if safeMethod(r.Method) {
		return nil
	}
	if subtle.ConstantTimeCompare([]byte(r.Header.Get(csrfHeader)), []byte(s.csrf)) != 1 {
		return errCSRF
	}
	return nil
}

// AdminSession is admin.Sessions: the credential of r's console session
// for the admin API. A write must carry the session's CSRF token.
func (c *Console) AdminSession(r *http.Request) (user, token string, err error) {
	s, _, err := c.of(r)
	if s == nil || err != nil {
		return "", "", err
	}
	if err := checkCSRF(r, s); err != nil {
		c.log.Warn("console write without its CSRF token refused", "method", r.Method, "path", r.URL.Path, "remote", r.RemoteAddr)
		return "", "", err
	}
	return s.user, s.token, nil
}

// setSession sets the session cookie: Secure, HttpOnly, SameSite=Strict,
// for the session's lifetime.
func (c *Console) setSession(w http.ResponseWriter, id string, s *session) {
	http.SetCookie(w, &http.Cookie{Name: sessionCookie, Value: id, Path: "/", Expires: s.expires,
		MaxAge: int(s.expires.Sub(c.now()).Seconds()), Secure: true, HttpOnly: true, SameSite: http.SameSiteStrictMode})
}

func clearCookie(w http.ResponseWriter, name string, mode http.SameSite) {
	http.SetCookie(w, &http.Cookie{Name: name, Value: "", Path: "/", MaxAge: -1, Secure: true, HttpOnly: true, SameSite: mode})
}

// sessionInfo is GET /console/session: whether the browser is signed in,
// as whom, the CSRF token its writes carry, and whether single sign-on is
// on.
type sessionInfo struct {
	SignedIn bool      `json:"signed_in"`
	Name     string    `json:"name,omitempty"`
	Kind     string    `json:"kind,omitempty"` // "sso" or "token"
	CSRF     string    `json:"csrf,omitempty"`
	Expires  time.Time `json:"expires,omitzero"`
	OIDC     bool      `json:"oidc"`
	// EndSession, in the answer to a sign-out of a single sign-on, is
	// where the page sends the browser to sign out at the provider too
	// (its end_session_endpoint; absent when it has none).
	EndSession string `json:"end_session_url,omitempty"`
}

func (c *Console) session(w http.ResponseWriter, r *http.Request) {
	w.Header().Set("Cache-Control", "no-store")
	s, _, _ := c.of(r)
	info := sessionInfo{OIDC: c.oidc != nil}
	if s != nil {
		info.SignedIn, info.Name, info.CSRF, info.Expires, info.Kind = true, s.name, s.csrf, s.expires, "token"
		if s.user != "" {
			info.Kind = "sso"
		}
	}
	writeJSON(w, http.StatusOK, info)
}

// loginToken is POST /console/login/token {"token"}: a session for an
// admin token or the master key, checked as the admin API checks them
// (and throttled the same way). The token stays in this process.
func (c *Console) loginToken(w http.ResponseWriter, r *http.Request) {
	var req struct {
		Token string `json:"token"`
	}
	dec := json.NewDecoder(http.MaxBytesReader(w, r.Body, 4<<10))
	dec.DisallowUnknownFields()
	if err := dec.Decode(&req); err != nil || req.Token == "" {
		c.fail(w, r, llmflow.Errorf(llmflow.EINVALID, "want {\"token\": \"llma-…\"}"))
		return
	}
	name, err := c.auth.CheckToken(r, req.Token)
	if err != nil {
		c.fail(w, r, err)
		return
	}
	id, s := c.sessions.create(session{token: req.Token, name: name})
	c.setSession(w, id, s)
	c.log.Info("console sign-in with a token", "principal", name, "remote", r.RemoteAddr)
	writeJSON(w, http.StatusOK, sessionInfo{SignedIn: true, Name: name, Kind: "token", CSRF: s.csrf, Expires: s.expires, OIDC: c.oidc != nil})
}

// logout is POST /console/logout: the session ends here at once (the
// cookie is cleared too). It needs the CSRF token.
func (c *Console) logout(w http.ResponseWriter, r *http.Request) {
	s, id, err := c.of(r)
	info := sessionInfo{OIDC: c.oidc != nil}
	if s != nil {
		if err := checkCSRF(r, s); err != nil {
			c.fail(w, r, err)
			return
		}
		c.sessions.remove(id)
		c.log.Info("console sign-out", "principal", s.name)
		if s.idToken != "" && c.oidc != nil {
			info.EndSession = c.oidc.endSessionURL(r.Context(), s.idToken)
		}
	} else if err != nil {
		c.fail(w, r, err)
		return
	}
	clearCookie(w, sessionCookie, http.SameSiteStrictMode)
	writeJSON(w, http.StatusOK, info)
}

func writeJSON(w http.ResponseWriter, status int, v any) {
	b, err := json.Marshal(v)
	if err != nil {
		http.Error(w, "internal error", http.StatusInternalServerError)
		return
	}
	w.Header().Set("Content-Type", "application/json")
	w.WriteHeader(status)
	w.Write(append(b, '\n'))
}
