package cnipolicy

import (
	"encoding/json"
	"regexp"
	"strconv"
	"strings"
)

// redacted replaces a value read from a ConfigMap in a message.
const redacted = "<redacted>"

// Redacted is msg without the values in secrets, as they are or quoted
// (Go's %q, JSON): every occurrence of a value of three characters or
// more, and shorter ones where they stand alone (not within a word or
// number).
func Redacted(msg string, secrets []string) string {
	for _, secret := range secrets {
		js, _ := json.Marshal(secret)
		for _, s := range []string{strconv.Quote(secret), string(js), secret} {
			msg = redact(msg, s)
		}
	}
	return msg
}

func redact(msg, s string) string {
	switch {
	case s == "":
		return msg
	case len(s) >= 3:
		return strings.ReplaceAll(msg, s, redacted)
	}
	re := regexp.MustCompile(`(^|[^A-Za-z0-9])` + regexp.QuoteMeta(s) + `($|[^A-Za-z0-9])`)
	for re.MatchString(msg) {
		msg = re.ReplaceAllString(msg, "${1}"+redacted+"${2}")
	}
	return msg
}
