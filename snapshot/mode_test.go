package snapshot_test

import (
	"encoding/json"
	"testing"

	"github.com/snapflip/snapflip/snapshot"
)

// A layer mode is written into manifests as the text it always had, and read back
// to the same mode; a text this version does not know is kept as written.
func TestLayerModeText(t *testing.T) {
	for _, tt := range []struct {
		mode snapshot.LayerMode
		want string
	}{
		{snapshot.ModeRowVersion, `{"kind":"","mode":"row-version","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
		{snapshot.ContentMode("first version"), `{"kind":"","mode":"content: first version","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
		{snapshot.ModeChangedOnly, `{"kind":"","mode":"row-version, changed rows only","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
		{snapshot.ModeStream, `{"kind":"","mode":"stream, changed ids only","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
		{snapshot.ModeSameFingerprint, `{"kind":"","mode":"unchanged: same fingerprint","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
		{snapshot.ParseLayerMode("some older mode"), `{"kind":"","mode":"some older mode","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
		{snapshot.LayerMode{}, `{"kind":"","inserted":0,"changed":0,"deleted":0,"rendered":0,"emitted":0,"written":0,"chunks":0,"chunks_written":0}`},
	} {
		b, err := json.Marshal(snapshot.OwnLayer{Mode: tt.mode})
		if got := string(b); err != nil || got != tt.want {
			t.Errorf("Marshal(%v) = %s, %v; want %s", tt.mode, got, err, tt.want)
		}
		var back snapshot.OwnLayer
		if err := json.Unmarshal(b, &back); err != nil || back.Mode != tt.mode {
			t.Errorf("Unmarshal(%s) = %+v, %v; want mode %+v", b, back.Mode, err, tt.mode)
		}
	}
}
