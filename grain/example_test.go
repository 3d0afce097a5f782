package grain_test

import (
	"context"
	"fmt"

	"github.com/agentsilo/agentsilo/grain"
)

// WeatherIn is the input of the forecast skill: its JSON Schema is inferred
// from the struct, so every field without omitempty is required.
type WeatherIn struct {
	City string `json:"city" jsonschema:"the city to forecast"`
	Days int    `json:"days,omitempty"`
}

type WeatherOut struct {
	Summary string `json:"summary"`
}

// Weather is an agent with one typed skill.
type Weather struct{}

func (Weather) OnMessage(ctx context.Context, m *grain.Message) (*grain.Message, error) {
	return grain.TypedHandler(Weather{}.forecast)(ctx, m)
}

func (Weather) forecast(ctx context.Context, in WeatherIn) (WeatherOut, error) {
	return WeatherOut{Summary: "sunny in " + in.City}, nil
}

func ExampleTypedSkill() {
	reg := grain.NewRegistry()
	err := reg.Register("Weather", func(h grain.Host) (grain.Agent, error) {
		return Weather{}, nil
	}, grain.TypeInfo{
		Description: "Forecasts the weather.",
		Skills:      []grain.Skill{grain.TypedSkill[WeatherIn, WeatherOut]("forecast", "Forecast for a city.", "weather")},
	})
	fmt.Println("register:", err)

	// Arguments from outside the runtime are checked against the skill's
	// input schema before they reach an agent.
	fmt.Println("good:", reg.ValidateInput("Weather", "forecast", []byte(`{"city": "Rome", "days": 3}`)))
	fmt.Println("missing city:", reg.ValidateInput("Weather", "forecast", []byte(`{"days": 3}`)))
	fmt.Println("wrong type:", reg.ValidateInput("Weather", "forecast", []byte(`{"city": 42}`)))
	// Output:
	// register: <nil>
	// good: <nil>
	// missing city: skill forecast of Weather: the arguments do not match its input schema: validating root: required: missing properties: ["city"]
	// wrong type: skill forecast of Weather: the arguments do not match its input schema: validating root: validating /properties/city: type: 42 has type "integer", want "string"
}
