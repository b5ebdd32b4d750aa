package testbed

import (
	"crypto/ecdsa"
	"crypto/elliptic"
	"crypto/rand"
	"crypto/x509"
	"crypto/x509/pkix"
	"encoding/hex"
	"encoding/pem"
	"fmt"
	"math/big"
	"net"
	"os"
	"path/filepath"
	"time"
)

// pki is the bed's throwaway trust: a CA, the API server's serving cert, the
// API server's client cert towards the kubelet, the service account key pair
// and two static bearer tokens (admin and node).
type pki struct {
	dir                   string
	adminToken, nodeToken string
	ca                    *x509.Certificate
	caKey                 *ecdsa.PrivateKey
}

func (p *pki) file(name string) string { return filepath.Join(p.dir, name) }

func newPKI(dir string, cfg Config) (*pki, error) {
	if err := os.MkdirAll(dir, 0o700); err != nil {
		return nil, err
	}
	p := &pki{dir: dir}
	var err error
	if p.adminToken, err = randomHex(24); err != nil {
		return nil, err
	}
	if p.nodeToken, err = randomHex(24); err != nil {
		return nil, err
	}
	p.caKey, err = ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	caTmpl := &x509.Certificate{
		Subject:               pkix.Name{CommonName: "fastpath-testbed-ca"},
		IsCA:                  true,
		BasicConstraintsValid: true,
		KeyUsage:              x509.KeyUsageCertSign | x509.KeyUsageDigitalSignature,
	}
	if p.ca, err = p.sign(caTmpl, &p.caKey.PublicKey, "ca"); err != nil {
		return nil, err
	}
	if err := writePEM(p.file("ca.key"), p.caKey); err != nil {
		return nil, err
	}
	firstServiceIP := cfg.ServiceCIDR.Addr().Next()
	if err := p.issue("apiserver", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver"},
		DNSNames:    []string{"localhost", "kubernetes", "kubernetes.default", "kubernetes.default.svc"},
		IPAddresses: []net.IP{net.ParseIP("127.0.0.1"), net.IP(firstServiceIP.AsSlice())},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageServerAuth},
	}); err != nil {
		return nil, err
	}
	if err := p.issue("kubelet-client", &x509.Certificate{
		Subject:     pkix.Name{CommonName: "kube-apiserver-kubelet-client", Organization: []string{"system:masters"}},
		ExtKeyUsage: []x509.ExtKeyUsage{x509.ExtKeyUsageClientAuth},
	}); err != nil {
		return nil, err
	}
	saKey, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return nil, err
	}
	if err := writePEM(p.file("sa.key"), saKey); err != nil {
		return nil, err
	}
	if err := writePEM(p.file("sa.pub"), &saKey.PublicKey); err != nil {
		return nil, err
	}
	tokens := fmt.Sprintf("%s,admin,uid-admin,\"system:masters\"\n%s,system:node:%s,uid-node,\"system:nodes\"\n",
		p.adminToken, p.nodeToken, cfg.NodeName)
	if err := os.WriteFile(p.file("tokens.csv"), []byte(tokens), 0o600); err != nil {
		return nil, err
	}
	return p, nil
}

// issue signs a leaf certificate and writes NAME.crt and NAME.key.
func (p *pki) issue(name string, tmpl *x509.Certificate) error {
	key, err := ecdsa.GenerateKey(elliptic.P256(), rand.Reader)
	if err != nil {
		return err
	}
	tmpl.KeyUsage = x509.KeyUsageDigitalSignature | x509.KeyUsageKeyEncipherment
	if _, err := p.sign(tmpl, &key.PublicKey, name); err != nil {
		return err
	}
	return writePEM(p.file(name+".key"), key)
}

// sign signs tmpl with the CA (or itself, for the CA) and writes NAME.crt.
func (p *pki) sign(tmpl *x509.Certificate, pub *ecdsa.PublicKey, name string) (*x509.Certificate, error) {
	serial, err := rand.Int(rand.Reader, new(big.Int).Lsh(big.NewInt(1), 62))
	if err != nil {
		return nil, err
	}
	tmpl.SerialNumber = serial
	tmpl.NotBefore = time.Now().Add(-time.Hour)
	tmpl.NotAfter = time.Now().Add(7 * 24 * time.Hour)
	parent := p.ca
	if parent == nil {
		parent = tmpl
	}
	der, err := x509.CreateCertificate(rand.Reader, tmpl, parent, pub, p.caKey)
	if err != nil {
		return nil, fmt.Errorf("sign %s certificate: %w", name, err)
	}
	if err := os.WriteFile(p.file(name+".crt"), pem.EncodeToMemory(&pem.Block{Type: "CERTIFICATE", Bytes: der}), 0o644); err != nil {
		return nil, err
	}
	return x509.ParseCertificate(der)
}

func writePEM(path string, key any) error {
	var block *pem.Block
	switch k := key.(type) {
	case *ecdsa.PrivateKey:
		der, err := x509.MarshalECPrivateKey(k)
		if err != nil {
			return err
		}
		block = &pem.Block{Type: "EC PRIVATE KEY", Bytes: der}
	default:
		der, err := x509.MarshalPKIXPublicKey(k)
		if err != nil {
			return err
		}
		block = &pem.Block{Type: "PUBLIC KEY", Bytes: der}
	}
	return os.WriteFile(path, pem.EncodeToMemory(block), 0o600)
}

func randomHex(n int) (string, error) {
	b := make([]byte, n)
	if _, err := rand.Read(b); err != nil {
		return "", err
	}
	return hex.EncodeToString(b), nil
}

// kubeconfig renders a token kubeconfig for the bed's API server.
func (p *pki) kubeconfig(cfg Config, user, token string) string {
	return fmt.Sprintf(`apiVersion: v1
kind: Config
clusters:
- name: fastpath-testbed
  cluster:
    server: https://127.0.0.1:%d
    certificate-authority: %s
users:
- name: %s
  user:
    token: %s
contexts:
- name: fastpath-testbed
  context: {cluster: fastpath-testbed, user: %s}
current-context: fastpath-testbed
`, cfg.APIServerPort, p.file("ca.crt"), user, token, user)
}
