package chat

import "testing"

func TestPyNumber(t *testing.T) {
	for lit, want := range map[string]string{
		"3": "3", "-0": "0", "123456789012345678901234567890": "123456789012345678901234567890",
		"1.5": "1.5", "3.0": "3.0", "1e5": "100000.0", "1e16": "1e+16", "1.5e16": "1.5e+16",
		"1e15": "1000000000000000.0", "0.0001": "0.0001", "0.00001": "1e-05", "-2.5e-7": "-2.5e-07",
		"0.1": "0.1", "123.456": "123.456", "-0.0": "-0.0", "1e400": "Infinity", "1E2": "100.0",
	} {
		if got := pyNumber(lit); got != want {
			t.Errorf("pyNumber(%s) = %s, want %s", lit, got, want)
		}
	}
}

func TestPyStyles(t *testing.T) {
	v, err := parseValue([]byte(`{"b": [1, 2.50, "x\u00e9\ud83d\udc4b"], "a": {"z": null, "y": true}, "\n": "\u0001\"\\"}`))
	if err != nil {
		t.Fatal(err)
	}
	ascii := style{itemSep: ", ", keySep: ": ", ascii: true} // json.dumps(v)
	if got, want := v.format(ascii), `{"b": [1, 2.5, "x\u00e9\ud83d\udc4b"], "a": {"z": null, "y": true}, "\n": "\u0001\"\\"}`; got != want {
		t.Errorf("ASCII style:\n got %s\nwant %s", got, want)
	}
	if got, want := v.format(pyDefault), "{\"b\": [1, 2.5, \"xé👋\"], \"a\": {\"z\": null, \"y\": true}, \"\\n\": \"\\u0001\\\"\\\\\"}"; got != want {
		t.Errorf("default style:\n got %s\nwant %s", got, want)
	}
	if got, want := v.format(pyCompactSorted), "{\"\\n\":\"\\u0001\\\"\\\\\",\"a\":{\"y\":true,\"z\":null},\"b\":[1,2.5,\"xé👋\"]}"; got != want {
		t.Errorf("compact sorted:\n got %s\nwant %s", got, want)
	}
	if got, want := v.format(outStyle), "{\"b\": [1, 2.5, \"xé👋\"], \"a\": {\"z\": null, \"y\": true}, \"\\n\": \"\\u0001\\\"\\\\\"}"; got != want {
		t.Errorf("out style:\n got %s\nwant %s", got, want)
	}
	d, err := parseValue([]byte(`{"k": 1, "j": 2, "k": 3}`))
	if err != nil {
		t.Fatal(err)
	}
	if got, want := d.format(pyDefault), `{"k": 3, "j": 2}`; got != want {
		t.Errorf("repeated key: %s, want %s", got, want)
	}
}
